// A swarm member in JavaScript, on js-libp2p, written from PROTOCOL.md (section 11 for the
// wire): it joins a cluster, verifies and folds every event it hears by gossip or pulls by
// sync, serves sync to others, and as a client can publish a goal (and, for the tests, a
// malformed copy of it that every member must refuse).
//
//   node tests/js/member.mjs CONFIG.json
//
// CONFIG: {cluster, authority, seed (hex), role, ticket, listen, bootstrap: [multiaddr],
//          goal: {text, scorers, quorum, max_depth, claim_lease_ms, hold_limit_ms, round_ms} | null,
//          malformed: bool}
// It prints one JSON object per line on stdout (listening, published, pulled, served, state)
// and runs until SIGTERM.

import './node20.mjs'
import { readFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { ping } from '@libp2p/ping'
import { gossipsub } from '@chainsafe/libp2p-gossipsub'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { multiaddr } from '@multiformats/multiaddr'
import { pushable } from 'it-pushable'
import { decodeEvent, Identity, Refused, sha256Hex, signEvent, ticketAdmits } from './protocol.mjs'
import { fold } from './fold.mjs'

const SYNC = '/swarm/sync/4.0.0'
const LIMITS = { summary: 16 << 20, offer: 16 << 20, need: 64 << 10, next: 64 << 10, done: 64 << 10, events: 2 << 20 }
const EVENTS_BUDGET = 1 << 20
const BATCH = 500
const DEADLINE_MS = 10_000
const SYNC_INTERVAL_MS = 3_000

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'))
const OFFER_PAGE = config.offerPage || 20000 // ids and runs in one offer frame; the rest come on 'next'
const me = new Identity(Buffer.from(config.seed, 'hex'))
const topic = `swarm/${config.cluster}/events`
const myTicket = { peer: me.peerId, role: config.role, sig: config.ticket }
const say = (record) => process.stdout.write(JSON.stringify(record) + '\n')

// --- the event set ----------------------------------------------------------------

const events = new Map() // id -> decoded event
const wires = new Map() // id -> canonical bytes
const held = new Map() // id -> [event, wire]: stamped more than 10 s ahead of our clock (section 9)
const HOLD_MS = 10_000
const HORIZON_MS = 600_000
const MAX_HELD = 10_000
const refused = {}
const badBytes = new Set() // sha256 of refused bytes: each bad event counted once
let dirty = true

function intake (raw) {
  const key = createHash('sha256').update(raw).digest('hex')
  if (badBytes.has(key)) return false
  try {
    const event = decodeEvent(raw)
    if (!ticketAdmits(config.cluster, config.authority, event.author, event.role, event.ticket)) {
      throw new Refused('ticket', `${event.author} holds no ticket as ${event.role}`)
    }
    const ahead = event.hlc[0] - Date.now()
    if (ahead > HORIZON_MS || (ahead > HOLD_MS && held.size >= MAX_HELD)) {
      refused.future = (refused.future || 0) + 1 // refused for now; sync offers it again later
      return false
    }
    if (ahead > HOLD_MS) { held.set(event.id, [event, Buffer.from(raw)]); return true }
    admit(event, raw)
    return true
  } catch (error) {
    if (!(error instanceof Refused)) throw error
    badBytes.add(key)
    refused[error.rule] = (refused[error.rule] || 0) + 1
    return false
  }
}

function admit (event, raw) {
  if (events.has(event.id)) return
  events.set(event.id, event)
  wires.set(event.id, Buffer.from(raw))
  dirty = true
}

setInterval(() => { // held events whose time has come
  for (const [id, [event, wire]] of held) {
    if (event.hlc[0] - Date.now() <= HOLD_MS) { held.delete(id); admit(event, wire) }
  }
}, 250)

function summary () {
  const byAuthor = new Map()
  for (const e of events.values()) {
    if (!byAuthor.has(e.author)) byAuthor.set(e.author, [])
    byAuthor.get(e.author).push(e)
  }
  const out = {}
  for (const [author, mine] of byAuthor) {
    const atSeq = new Map()
    for (const e of mine) atSeq.set(e.seq, [...(atSeq.get(e.seq) || []), e])
    let seq = 0
    let head = null
    while ((atSeq.get(seq + 1) || []).length === 1 && atSeq.get(seq + 1)[0].prev === head) {
      seq += 1
      head = atSeq.get(seq)[0].id
    }
    out[author] = [seq, head, sha256Hex(mine.map((e) => e.id).sort().join(''))]
  }
  return { out, byAuthor }
}

function offerFor (theirs) {
  const { out: ours, byAuthor } = summary()
  const offered = {}
  for (const author of Object.keys(ours).sort()) {
    const other = theirs[author]
    if (other && other[2] === ours[author][2]) continue
    const held = other && other[1] ? events.get(other[1]) : undefined
    const shared = held && held.author === author && held.seq === other[0] && ours[author][0] >= other[0]
    const after = shared ? held.seq : 0
    const [prefixSeq, prefixId] = ours[author]
    if (prefixId !== null && prefixSeq > after && byAuthor.get(author).length === prefixSeq) {
      offered[author] = [after, prefixSeq, prefixId] // all we hold of it is its chain: the run, no ids
      continue
    }
    offered[author] = [after, feedOf(byAuthor.get(author)).filter((e) => e.seq > after).map((e) => e.id)]
  }
  return { ours, offered }
}

function feedOf (mine) { return [...mine].sort((a, b) => a.seq - b.seq || (a.id < b.id ? -1 : 1)) }

function holdsRun (author, [, through, head], ours) { // its head at its last seq, inside our gap-free prefix
  const event = events.get(head)
  return event !== undefined && event.author === author && event.seq === through && (ours[author] || [0])[0] >= through
}

const isSeq = (n) => Number.isSafeInteger(n) && n >= 0

function checkRanges (ranges, what) {
  if (!Array.isArray(ranges) || !ranges.every((r) => Array.isArray(r) && r.length === 3 && typeof r[0] === 'string' &&
      isSeq(r[1]) && isSeq(r[2]) && r[1] >= 1 && r[1] <= r[2])) {
    throw new Error(`expected [author, first, last] with 1 <= first <= last in '${what}'`)
  }
  return ranges
}

const seqsOf = (ranges) => ranges.reduce((n, [, first, last]) => n + last - first + 1, 0)

function splitRanges (ranges, room) { // the first room seqs (whole ranges, then part of the next), and the rest
  const taken = []
  for (let i = 0; i < ranges.length; i++) {
    const [author, first, last] = ranges[i]
    if (room <= 0) return [taken, ranges.slice(i)]
    if (last - first + 1 > room) {
      taken.push([author, first, first + room - 1])
      return [taken, [[author, first + room, last], ...ranges.slice(i + 1)]]
    }
    taken.push(ranges[i])
    room -= last - first + 1
  }
  return [taken, []]
}

function answerNeed (message) { // ids first, then each range by seq, until the budget
  if (!Array.isArray(message.ids)) throw new Error('expected a list of ids in a need')
  const ranges = checkRanges(message.ranges, 'ranges')
  if (message.ids.length + seqsOf(ranges) > BATCH) throw new Error(`a need asked for more than ${BATCH} events`)
  const out = []
  const rest = []
  const restRanges = []
  let size = 0
  const add = (wire) => {
    const text = wire.toString('utf8')
    out.push(text)
    size += Buffer.byteLength(JSON.stringify(text)) + 1 // its bytes inside the frame
  }
  for (let i = 0; i < message.ids.length; i++) {
    if (size >= EVENTS_BUDGET) { rest.push(...message.ids.slice(i).filter((id) => wires.has(id))); break }
    const wire = wires.get(message.ids[i])
    if (wire) add(wire)
  }
  const byAuthor = summary().byAuthor
  outer: for (let i = 0; i < ranges.length; i++) {
    const [author, first, last] = ranges[i]
    if (size >= EVENTS_BUDGET) { restRanges.push(...ranges.slice(i)); break }
    let lastSent = 0
    for (const e of feedOf(byAuthor.get(author) || []).filter((e) => e.seq >= first && e.seq <= last)) {
      if (size >= EVENTS_BUDGET) { // a cut inside a fork's seq goes on after it: the siblings come by id next pull
        if (lastSent < last) restRanges.push([author, lastSent + 1, last])
        restRanges.push(...ranges.slice(i + 1))
        break outer
      }
      add(wires.get(e.id))
      lastSent = e.seq
    }
  }
  return { type: 'events', events: out, rest, rest_ranges: restRanges }
}

function pagesOf (offered) { // OFFER_PAGE ids and runs a page at most; an author's ids may go on in the next
  const pages = [{}]
  let room = OFFER_PAGE
  for (const [author, entry] of Object.entries(offered)) {
    if (entry.length === 3) { // a run: one entry
      if (room === 0) { pages.push({}); room = OFFER_PAGE }
      pages[pages.length - 1][author] = entry
      room -= 1
      continue
    }
    const [after, ids] = entry
    let left = ids
    do {
      if (room === 0) { pages.push({}); room = OFFER_PAGE }
      pages[pages.length - 1][author] = [after, left.slice(0, room)]
      room -= Math.min(room, left.length)
      left = left.slice(pages[pages.length - 1][author][1].length)
    } while (left.length)
  }
  return pages
}

// --- frames over a libp2p stream (4-byte big-endian length, JSON) ------------------------

class Frames {
  constructor (stream) {
    this.stream = stream
    this.out = pushable()
    stream.sink(this.out).catch(() => {})
    this.source = stream.source[Symbol.asyncIterator]()
    this.chunks = []
    this.size = 0
  }

  async take (n) {
    while (this.size < n) {
      const { value, done } = await this.source.next()
      if (done) throw new Error('the peer closed the stream')
      const bytes = value.subarray()
      this.chunks.push(bytes)
      this.size += bytes.length
    }
    const all = Buffer.concat(this.chunks, this.size)
    this.chunks = [all.subarray(n)]
    this.size -= n
    return all.subarray(0, n)
  }

  async receive (...types) {
    const length = (await this.take(4)).readUInt32BE(0)
    const limit = Math.max(...types.map((t) => LIMITS[t]))
    if (length > limit) throw new Error(`a ${length}-byte frame, limit ${limit}`)
    const message = JSON.parse((await this.take(length)).toString('utf8'))
    if (!types.includes(message.type)) throw new Error(`expected ${types.join('/')}, got ${message.type}`)
    return message
  }

  send (message) {
    const body = Buffer.from(JSON.stringify(message), 'utf8')
    const head = Buffer.alloc(4)
    head.writeUInt32BE(body.length)
    this.out.push(Buffer.concat([head, body]))
  }

  close () { this.out.end() }
}

function checkTicket (message, remote) {
  const t = message.ticket
  if (!t || t.peer !== remote || !ticketAdmits(config.cluster, config.authority, t.peer, t.role, t.sig)) {
    throw new Error(`${remote} is not admitted to ${config.cluster}`)
  }
}

async function withDeadline (stream, work) {
  const timer = setTimeout(() => stream.abort(new Error('sync deadline')), DEADLINE_MS)
  try { return await work() } finally { clearTimeout(timer) }
}

async function serve ({ stream, connection }) {
  const remote = connection.remotePeer.toString()
  const frames = new Frames(stream)
  try {
    await withDeadline(stream, async () => {
      const hello = await frames.receive('summary')
      if (hello.cluster !== config.cluster) throw new Error(`cluster ${hello.cluster}`)
      checkTicket(hello, remote)
      const { ours, offered } = offerFor(hello.authors || {})
      const pages = pagesOf(offered)
      let page = 0
      frames.send({ type: 'offer', ticket: myTicket, summary: ours, authors: pages[0], more: pages.length > 1 })
      let sent = 0
      for (;;) {
        const message = await frames.receive('need', 'next', 'done')
        if (message.type === 'done') break
        if (message.type === 'next') {
          page += 1
          if (page >= pages.length) throw new Error('asked for the next offer page after the last')
          frames.send({ type: 'offer', authors: pages[page], more: page + 1 < pages.length })
          continue
        }
        const answer = answerNeed(message)
        frames.send(answer)
        sent += answer.events.length
      }
      if (sent) say({ event: 'served', peer: remote, events: sent })
    })
  } catch (error) {
    say({ event: 'serve-failed', peer: remote, error: String(error.message || error).slice(0, 200) })
    stream.abort(error) // a reset: what the peer still sends is dropped
  } finally {
    frames.close()
  }
}

async function pull (node, peer) {
  const remote = peer.toString()
  let stream
  try {
    stream = await node.dialProtocol(peer, SYNC, { signal: AbortSignal.timeout(DEADLINE_MS) })
  } catch { return }
  const frames = new Frames(stream)
  try {
    await withDeadline(stream, async () => {
      frames.send({ type: 'summary', cluster: config.cluster, ticket: myTicket, authors: summary().out })
      let offer = await frames.receive('offer')
      checkTicket(offer, remote)
      let got = 0
      for (;;) {
        if (typeof offer.more !== 'boolean') throw new Error("an offer without its 'more' flag")
        if (offer.more && !Object.values(offer.authors).some((entry) => entry.length === 3 || entry[1].length)) throw new Error('an offer page that says more follow lists no ids and no run')
        got += await fetchPage(frames, offer)
        if (!offer.more) break
        frames.send({ type: 'next' })
        offer = await frames.receive('offer')
      }
      frames.send({ type: 'done' })
      if (got) say({ event: 'pulled', peer: remote, events: got })
    })
  } catch (error) {
    say({ event: 'pull-failed', peer: remote, error: String(error.message || error).slice(0, 200) })
  } finally {
    frames.close()
  }
}

async function fetchPage (frames, offer) { // ask for what one offer page lists and we lack: ids, and runs by seq
  const ours = summary().out
  let wanted = []
  let ranges = []
  for (const [author, entry] of Object.entries(offer.authors)) {
    if (!Array.isArray(entry) || !isSeq(entry[0])) throw new Error(`a bad offer entry for ${author}`)
    if (entry.length === 3 && isSeq(entry[1]) && entry[1] > entry[0] && typeof entry[2] === 'string') {
      if (!holdsRun(author, entry, ours)) ranges.push([author, entry[0] + 1, entry[1]])
    } else if (entry.length === 2 && Array.isArray(entry[1])) {
      wanted.push(...entry[1].filter((id) => !events.has(id) && !held.has(id)))
    } else throw new Error(`a bad offer entry for ${author}`)
  }
  let got = 0
  while (wanted.length || ranges.length) {
    const asked = wanted.slice(0, BATCH)
    wanted = wanted.slice(BATCH)
    let askedRanges
    [askedRanges, ranges] = splitRanges(ranges, BATCH - asked.length)
    frames.send({ type: 'need', ids: asked, ranges: askedRanges })
    const answer = await frames.receive('events')
    const restRanges = checkRanges(answer.rest_ranges, 'rest_ranges')
    if (!answer.rest.every((id) => asked.includes(id))) throw new Error("'rest' lists an id not asked")
    if (!restRanges.every(([a, f, l]) => askedRanges.some(([b, g, m]) => a === b && g <= f && l <= m))) {
      throw new Error("'rest_ranges' outside the ranges asked")
    }
    const rest = [...new Set(answer.rest)] // an id listed twice is asked once
    const left = rest.length + seqsOf(restRanges)
    const asking = new Set(asked).size + seqsOf(askedRanges)
    if (left && (!answer.events.length || left >= asking)) {
      throw new Error('an events frame left for later as much as was asked, or sent nothing')
    }
    if (answer.events.length + left < asking) throw new Error('an events frame neither answered nor left for later all that was asked')
    for (const text of answer.events) if (intake(Buffer.from(text, 'utf8'))) got++
    wanted = rest.concat(wanted)
    ranges = restRanges.concat(ranges)
  }
  return got
}

// --- the host ------------------------------------------------------------------------

const node = await createLibp2p({
  privateKey: await generateKeyPairFromSeed('Ed25519', Buffer.from(config.seed, 'hex')),
  addresses: { listen: [config.listen || '/ip4/127.0.0.1/tcp/0'] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  services: {
    identify: identify(),
    ping: ping(),
    pubsub: gossipsub({
      globalSignaturePolicy: 'StrictSign',
      msgIdFn: (message) => createHash('sha256').update(message.data).digest(),
      allowPublishToZeroTopicPeers: true,
      D: 4, Dlo: 3, Dhi: 6, heartbeatInterval: 1000
    })
  }
})
if (node.peerId.toString() !== me.peerId) throw new Error(`peer id ${node.peerId} != ${me.peerId} from PROTOCOL.md`)
const pubsub = node.services.pubsub
pubsub.topicValidators.set(topic, (_peer, message) => (intake(Buffer.from(message.data)) ? 'accept' : 'reject'))
pubsub.subscribe(topic)
await node.handle(SYNC, (incoming) => { serve(incoming) })
node.addEventListener('peer:connect', (evt) => { pull(node, evt.detail) })
say({ event: 'listening', peer: me.peerId, addrs: node.getMultiaddrs().map((a) => a.toString()) })

for (const address of config.bootstrap || []) {
  node.dial(multiaddr(address)).catch((error) => say({ event: 'dial-failed', address, error: String(error.message) }))
}

let seq = 0
let prev = null
let lastHlc = [0, 0]
async function publish (content) {
  const now = Date.now()
  const hlc = now > lastHlc[0] ? [now, 0] : [lastHlc[0], lastHlc[1] + 1]
  lastHlc = hlc
  seq += 1
  const { event, wire } = signEvent(me, { role: config.role, ticket: config.ticket, seq, prev, hlc, body: content })
  prev = event.id
  intake(wire)
  await pubsub.publish(topic, wire)
  say({ event: 'published', id: event.id, kind: content.kind })
  return { event, wire }
}

setInterval(() => { for (const peer of node.getPeers()) pull(node, peer) }, SYNC_INTERVAL_MS)
let lastDigest = ''
setInterval(() => {
  if (!dirty) return
  dirty = false
  const tree = fold(events)
  if (tree.digest !== lastDigest) {
    lastDigest = tree.digest
    say({ event: 'state', digest: tree.digest, complete: tree.complete, events: events.size, counted: tree.counted, refused })
  }
}, 250)

if (config.goal) {
  const deadline = Date.now() + 10_000
  while (pubsub.getSubscribers(topic).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
  await new Promise((r) => setTimeout(r, 1500)) // a heartbeat or two, so the mesh has formed
  const { event } = await publish({ kind: 'goal', ...config.goal })
  if (config.malformed) {
    // the same goal, pretty-printed: its id and signature are fine, its bytes are not canonical
    const pretty = Buffer.from(JSON.stringify(event, null, 1), 'utf8')
    await pubsub.publish(topic, pretty)
    say({ event: 'sent-malformed', bytes: pretty.length })
  }
}

process.on('SIGTERM', async () => { await node.stop(); process.exit(0) })
