// Checks this implementation against tests/vectors/protocol.json; exit 1 on any mismatch.
//
//   node tests/js/vectors.mjs [path/to/protocol.json]

import { readFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { canonical, decodeEvent, Identity, Refused, sha256Hex, signingBytes, ticketAdmits, ticketBytes } from './protocol.mjs'
import { fold } from './fold.mjs'

const path = process.argv[2] || new URL('../vectors/protocol.json', import.meta.url).pathname
const vectors = JSON.parse(readFileSync(path, 'utf8'))
const { name: cluster, authority } = vectors.cluster
const failures = []
const check = (ok, what) => { if (!ok) failures.push(what) }
let checked = 0

for (const key of vectors.keys) {
  const seed = createHash('sha256').update(key.seed_text).digest()
  const identity = new Identity(seed)
  check(seed.toString('hex') === key.seed && identity.publicKey.toString('hex') === key.public_key &&
    identity.peerId === key.peer, `key ${key.name}: peer id ${identity.peerId} != ${key.peer}`)
  checked++
}
for (const t of vectors.tickets) {
  check(ticketBytes(authority, cluster, t.peer, t.role).toString() === t.bytes, `ticket bytes of ${t.role}`)
  check(ticketAdmits(cluster, authority, t.peer, t.role, t.sig), `ticket of ${t.role} does not verify`)
  check(!ticketAdmits(cluster, authority, t.peer, t.role === 'client' ? 'scorer' : 'client', t.sig), `ticket of ${t.role} admits another role`)
  checked++
}
const byId = new Map()
for (const v of vectors.events) {
  try {
    const event = decodeEvent(Buffer.from(v.wire, 'utf8'))
    check(event.id === v.id && event.sig === v.sig, `event ${v.id.slice(0, 8)}: id or sig differ`)
    check(signingBytes(event).toString() === v.signing_bytes, `event ${v.id.slice(0, 8)}: signing bytes differ`)
    check(sha256Hex(Buffer.from(v.signing_bytes)) === v.id, `event ${v.id.slice(0, 8)}: id is not sha256 of signing bytes`)
    check(canonical(event) === v.wire, `event ${v.id.slice(0, 8)}: re-encoding differs`)
    check(ticketAdmits(cluster, authority, event.author, event.role, event.ticket), `event ${v.id.slice(0, 8)}: ticket`)
    byId.set(event.id, event)
  } catch (error) {
    failures.push(`event ${v.id.slice(0, 8)} refused: ${error.message}`)
  }
  checked++
}
for (const r of vectors.refused) {
  const raw = Buffer.from(r.base64, 'base64')
  let rule = 'accepted'
  try {
    const event = decodeEvent(raw)
    if (!ticketAdmits(cluster, authority, event.author, event.role, event.ticket)) rule = 'ticket'
  } catch (error) {
    if (!(error instanceof Refused)) throw error
    rule = error.rule
  }
  check(rule === r.rule, `refusal "${r.name}": got ${rule}, expected ${r.rule}`)
  checked++
}
for (const set of vectors.sets) checkSet(set, byId)

function checkSet (set, byId) {
  const missing = set.ids.filter((id) => !byId.has(id))
  check(missing.length === 0, `set "${set.name}": ${missing.length} of its events did not decode`)
  const events = new Map(set.ids.filter((id) => byId.has(id)).map((id) => [id, byId.get(id)]))
  const tree = fold(events)
  check(tree.digest === set.digest, `set "${set.name}": digest ${tree.digest.slice(0, 12)} != ${set.digest.slice(0, 12)}`)
  check(tree.complete === set.complete, `set "${set.name}": complete ${tree.complete}`)
  check(JSON.stringify(tree.equivocators) === JSON.stringify(set.equivocators), `set "${set.name}": equivocators`)
  const splits = Object.fromEntries([...tree.nodes.values()].filter((n) => n.split).map((n) => [n.id, n.split]))
  const results = Object.fromEntries([...tree.nodes.values()].filter((n) => n.result).map((n) => [n.id, n.result]))
  check(canonical(splits) === canonical(set.splits), `set "${set.name}": accepted splits differ`)
  check(canonical(results) === canonical(set.results), `set "${set.name}": accepted results differ`)
  // any order: the same digest (a seeded shuffle and the reverse)
  const entries = [...events.entries()]
  let state = 12345
  for (let i = entries.length - 1; i > 0; i--) {
    state = (state * 1103515245 + 12345) % 2147483648
    const j = state % (i + 1);
    [entries[i], entries[j]] = [entries[j], entries[i]]
  }
  check(fold(new Map(entries)).digest === set.digest, `set "${set.name}": digest depends on order`)
  check(fold(new Map(entries.reverse())).digest === set.digest, `set "${set.name}": digest depends on order`)
  checked++
}
// sets from the property tests' adversarial generator: promises, later rounds, bad
// justifications, forks by scorers, acks and results, in a cluster of their own
const adversarial = vectors.adversarial
const adversarialEvents = new Map()
for (const wire of adversarial.events) {
  try {
    const event = decodeEvent(Buffer.from(wire, 'utf8'))
    check(ticketAdmits(adversarial.cluster.name, adversarial.cluster.authority, event.author, event.role, event.ticket),
      `adversarial event ${event.id.slice(0, 8)}: ticket`)
    adversarialEvents.set(event.id, event)
  } catch (error) {
    failures.push(`adversarial event refused: ${error.message}`)
  }
}
for (const set of adversarial.sets) checkSet(set, adversarialEvents)

for (const failure of failures) console.error(`FAIL ${failure}`)
console.log(JSON.stringify({ checked, failures: failures.length }))
process.exit(failures.length ? 1 : 0)
