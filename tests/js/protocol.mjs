// The swarm-plan protocol, version 2, sections 1 and 2 of PROTOCOL.md: canonical
// bytes, peer ids, tickets, and the refusal rules for an event's bytes.
//
// Written from PROTOCOL.md and tests/vectors/protocol.json, not from the Python
// code: it is the second implementation the interop tests run against ours.
// Signing uses Node's own crypto; verifying uses libsodium, whose rules PROTOCOL.md names
// (Node's OpenSSL accepts signatures libsodium refuses, e.g. an identity-point R).

import { createHash, createPrivateKey, createPublicKey, sign as edSign } from 'node:crypto'
import sodium from 'libsodium-wrappers'

await sodium.ready

export const MAX_EVENT_BYTES = 32 * 1024
export const MAX_INT = 2 ** 53 - 1
const EVENT_DOMAIN = 'swarm-plan/event/v2\n'
const TICKET_DOMAIN = 'swarm-plan/ticket/v1\n'
const ROLES = ['client', 'decomposer', 'scorer', 'executor', 'observer']
export const AUTHOR_ROLE = {
  goal: 'client', proposal: 'decomposer', vote: 'scorer', promise: 'scorer', candidate: 'scorer',
  ballot: 'scorer', ack: 'scorer', claim: 'executor', renew: 'executor', result: 'executor', failure: 'executor'
}

export class Refused extends Error {
  constructor (rule, detail) {
    super(`refused (${rule}): ${detail}`)
    this.rule = rule
  }
}

export const sha256Hex = (data) => createHash('sha256').update(data).digest('hex')

// --- canonical encoding (section 2) ---------------------------------------

export function canonical (value) {
  if (value === null) return 'null'
  if (value === true) return 'true'
  if (value === false) return 'false'
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) throw new Error(`${value} is not an integer within 2^53-1`)
    return String(value)
  }
  if (typeof value === 'string') return JSON.stringify(value)
  if (Array.isArray(value)) return '[' + value.map(canonical).join(',') + ']'
  const keys = Object.keys(value).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
  return '{' + keys.map((k) => JSON.stringify(k) + ':' + canonical(value[k])).join(',') + '}'
}

export const canonicalBytes = (value) => Buffer.from(canonical(value), 'utf8')

// --- peer ids and keys -----------------------------------------------------

const ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
const KEY_PREFIX = Buffer.from('002408011220', 'hex') // identity multihash of a protobuf ed25519 key
const PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex')

export function base58Encode (bytes) {
  let n = BigInt('0x' + (Buffer.from(bytes).toString('hex') || '0'))
  let out = ''
  while (n > 0n) { out = ALPHABET[Number(n % 58n)] + out; n /= 58n }
  for (const b of bytes) { if (b !== 0) break; out = '1' + out }
  return out
}

export function base58Decode (text) {
  let n = 0n
  for (const ch of text) {
    const digit = ALPHABET.indexOf(ch)
    if (digit < 0) throw new Error(`not base58: ${ch}`)
    n = n * 58n + BigInt(digit)
  }
  let hex = n === 0n ? '' : n.toString(16)
  if (hex.length % 2) hex = '0' + hex
  const zeros = text.length - text.replace(/^1+/, '').length
  return Buffer.concat([Buffer.alloc(zeros), Buffer.from(hex, 'hex')])
}

export const peerIdOf = (publicKey) => base58Encode(Buffer.concat([KEY_PREFIX, publicKey]))

export function publicKeyOf (peerId) {
  const raw = base58Decode(peerId)
  if (raw.length !== 38 || !raw.subarray(0, 6).equals(KEY_PREFIX)) throw new Error(`${peerId} is not an ed25519 peer id`)
  return raw.subarray(6)
}

export function verify (peerId, message, signature) {
  return signature.length === 64 && sodium.crypto_sign_verify_detached(signature, message, publicKeyOf(peerId))
}

export class Identity {
  constructor (seed) {
    this.seed = Buffer.from(seed)
    this.privateKey = createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, this.seed]), format: 'der', type: 'pkcs8' })
    this.publicKey = createPublicKey(this.privateKey).export({ format: 'der', type: 'spki' }).subarray(12)
    this.peerId = peerIdOf(this.publicKey)
  }

  sign (message) { return edSign(null, message, this.privateKey) }
}

// --- tickets (section 1) -----------------------------------------------------

export const ticketBytes = (authority, cluster, peer, role) =>
  Buffer.concat([Buffer.from(TICKET_DOMAIN), canonicalBytes({ authority, cluster, peer, role })])

export function ticketAdmits (cluster, authority, peer, role, sig) {
  if (typeof sig !== 'string' || !SIG.test(sig)) return false
  return verify(authority, ticketBytes(authority, cluster, peer, role), Buffer.from(sig, 'base64'))
}

// --- the schema (section 2) ----------------------------------------------------

const HEX64 = /^[0-9a-f]{64}$/
const PEER = /^12D3KooW[1-9A-HJ-NP-Za-km-z]{44}$/
const SIG = /^[A-Za-z0-9+/]{85}[AQgw]==$/ // canonical base64 of 64 bytes: one spelling

const isInt = (v, lo, hi) => typeof v === 'number' && Number.isInteger(v) && v >= lo && v <= hi
const text = (lo, hi) => (v) => typeof v === 'string' && [...v].length >= lo && [...v].length <= hi
const hex = (v) => typeof v === 'string' && HEX64.test(v)
const bool = (v) => typeof v === 'boolean'
const int = (lo, hi) => (v) => isInt(v, lo, hi)
const ids = (v) => Array.isArray(v) && v.length <= 64 && v.every(hex)
const score = int(1, 5)
const round = int(1, 1000)
const subgoal = (v) => object(v, { title: text(1, 120), description: text(0, 1000), executable: bool }) === null
const subgoals = (v) => Array.isArray(v) && v.length >= 2 && v.length <= 6 && v.every(subgoal)
const roster = (v) => Array.isArray(v) && v.length >= 1 && v.length <= 64 &&
  v.every((p) => typeof p === 'string' && PEER.test(p))

const BODIES = {
  goal: { text: text(1, 2000), scorers: roster, quorum: int(1, 64), max_depth: int(1, 6),
    claim_lease_ms: int(100, 3_600_000), hold_limit_ms: int(100, 86_400_000), round_ms: int(100, 3_600_000) },
  proposal: { node: hex, strategy: text(1, 40), subgoals, model: text(0, 120) },
  vote: { proposal: hex, clarity: score, non_overlap: score, coverage: score, approve: bool,
    reason: text(0, 500), model: text(0, 120) },
  promise: { node: hex, round: int(2, 1000) },
  candidate: { node: hex, round, value: hex, promises: ids, certificate: ids },
  ballot: { node: hex, round, candidate: hex, approve: bool },
  claim: { leaf: hex, epoch: round },
  ack: { leaf: hex, claim: hex, epoch: round },
  renew: { claim: hex },
  result: { leaf: hex, claim: hex, output: text(1, 8000), model: text(0, 120) },
  failure: { leaf: hex, claim: hex, reason: text(1, 500) }
}

const ENVELOPE = {
  v: (v) => v === 2,
  author: (v) => typeof v === 'string' && PEER.test(v),
  role: (v) => ROLES.includes(v),
  ticket: (v) => typeof v === 'string' && SIG.test(v),
  seq: int(1, MAX_INT),
  prev: (v) => v === null || hex(v),
  hlc: (v) => Array.isArray(v) && v.length === 2 && isInt(v[0], 0, MAX_INT) && isInt(v[1], 0, 2 ** 31 - 1),
  body: (v) => body(v) === null,
  id: hex,
  sig: (v) => typeof v === 'string' && SIG.test(v)
}

// null when `value` is an object with exactly `fields`, each passing its check; else what is wrong
function object (value, fields) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return 'not an object'
  for (const key of Object.keys(value)) if (!Object.hasOwn(fields, key)) return `${key}: extra field`
  for (const [key, check] of Object.entries(fields)) {
    if (!Object.hasOwn(value, key)) return `${key}: field required`
    if (!check(value[key])) return `${key}: wrong type or out of bounds`
  }
  return null
}

function body (value) {
  if (value === null || typeof value !== 'object' || !Object.hasOwn(BODIES, value.kind)) return 'kind: not a known kind'
  const problem = object(value, { kind: () => true, ...BODIES[value.kind] })
  if (problem) return problem
  if (value.kind === 'goal') {
    const sorted = [...new Set(value.scorers)].sort()
    if (sorted.join() !== value.scorers.join()) return 'scorers must be distinct and sorted'
    for (const scorer of value.scorers) {
      try { publicKeyOf(scorer) } catch { return `scorer ${scorer} is not an ed25519 peer id` }
    }
    const n = value.scorers.length
    if (!(2 * value.quorum > n && value.quorum <= n)) return 'quorum must be a majority of the scorers'
    if (value.hold_limit_ms < value.claim_lease_ms) return 'hold_limit_ms must be at least claim_lease_ms'
  }
  return null
}

// --- decoding (section 2: the refusal rules, in order) ---------------------------

const MAX_DEPTH = 200 // arrays and objects nested deeper are refused as json

// Why raw JSON text is not this protocol's JSON before it is even parsed (null when it may
// be): nested more than MAX_DEPTH deep (JSON.parse would overflow the stack), or a number
// with a fraction or exponent (JSON.parse would read 2.0 as 2). One pass, outside strings.
function unparseable (textValue) {
  let depth = 0
  let inString = false
  for (let i = 0; i < textValue.length; i++) {
    const ch = textValue[i]
    if (inString) {
      if (ch === '\\') i++
      else if (ch === '"') inString = false
    } else if (ch === '"') inString = true
    else if (ch === '[' || ch === '{') {
      if (++depth > MAX_DEPTH) return `nested more than ${MAX_DEPTH} deep`
    } else if (ch === ']' || ch === '}') depth--
    else if (/[-0-9]/.test(ch)) {
      const token = /^[-+0-9.eE]+/.exec(textValue.slice(i, i + 400))[0]
      if (/[.eE]/.test(token)) return 'a number with a fraction or an exponent'
      i += token.length - 1
    }
  }
  return null
}

function wellFormed (value) {
  if (typeof value === 'string') return value.isWellFormed()
  if (Array.isArray(value)) return value.every(wellFormed)
  if (value && typeof value === 'object') return Object.entries(value).every(([k, v]) => k.isWellFormed() && wellFormed(v))
  return true
}

function missingField (sent, full, path) {
  if (Array.isArray(full) && Array.isArray(sent)) {
    for (let i = 0; i < Math.min(full.length, sent.length); i++) {
      const inner = missingField(sent[i], full[i], `${path}${i}.`)
      if (inner) return inner
    }
  } else if (full && typeof full === 'object' && !Array.isArray(full) && sent && typeof sent === 'object') {
    for (const key of Object.keys(full).sort()) {
      if (!(key in sent)) return path + key
      const inner = missingField(sent[key], full[key], `${path}${key}.`)
      if (inner) return inner
    }
  }
  return null
}

export function decodeEvent (raw) {
  const bytes = Buffer.from(raw)
  if (bytes.length > MAX_EVENT_BYTES) throw new Refused('size', `${bytes.length} bytes, at most ${MAX_EVENT_BYTES}`)
  let textValue, value
  try {
    textValue = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes)
    const why = unparseable(textValue)
    if (why) throw new Error(why)
    value = JSON.parse(textValue)
  } catch (error) {
    throw new Refused('json', `not JSON: ${error.message}`)
  }
  if (!wellFormed(value)) throw new Refused('json', 'a string holds a lone surrogate')
  const problem = object(value, ENVELOPE)
  if (problem) throw new Refused('schema', problem)
  if (!canonicalBytes(value).equals(bytes)) {
    const missing = missingField(JSON.parse(textValue), value, '')
    throw new Refused(missing ? 'schema' : 'canonical', missing ? `${missing}: field required` : 'not the canonical encoding')
  }
  if (AUTHOR_ROLE[value.body.kind] !== value.role) throw new Refused('role', `a ${value.body.kind} by a ${value.role}`)
  if ((value.seq === 1) !== (value.prev === null)) throw new Refused('chain', 'prev must be null exactly when seq is 1')
  try { publicKeyOf(value.author) } catch (error) { throw new Refused('author', error.message) }
  const { id, sig, ...unsigned } = value
  const signing = Buffer.concat([Buffer.from(EVENT_DOMAIN), canonicalBytes(unsigned)])
  if (sha256Hex(signing) !== id) throw new Refused('id', 'the content does not hash to its id')
  if (!verify(value.author, signing, Buffer.from(sig, 'base64'))) throw new Refused('signature', 'does not verify')
  return value
}

export function signEvent (identity, { role, ticket, seq, prev, hlc, body: content }) {
  const unsigned = { v: 2, author: identity.peerId, role, ticket, seq, prev, hlc, body: content }
  const signing = Buffer.concat([Buffer.from(EVENT_DOMAIN), canonicalBytes(unsigned)])
  const event = { ...unsigned, id: sha256Hex(signing), sig: identity.sign(signing).toString('base64') }
  return { event, wire: canonicalBytes(event) }
}

export const signingBytes = (event) => {
  const { id, sig, ...unsigned } = event
  return Buffer.concat([Buffer.from(EVENT_DOMAIN), canonicalBytes(unsigned)])
}
