// The fold of PROTOCOL.md, sections 3 to 7 and 10: feeds, the tree, rounds,
// claims, results and the digest, as a pure function of a set of decoded events.
//
// Written from PROTOCOL.md; the Python fold is the other implementation.

import { canonical, sha256Hex } from './protocol.mjs'

const MAX_DRAFTS = 3
const MAX_RESULTS = 3

const later = (a, b) => a.hlc[0] > b.hlc[0] || (a.hlc[0] === b.hlc[0] && a.hlc[1] > b.hlc[1])
const orderKey = (e) => [e.hlc[0], e.hlc[1], e.author, e.id]
const compareKeys = (a, b) => {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1
  return 0
}
const push = (map, key, value) => { if (!map.has(key)) map.set(key, []); map.get(key).push(value) }

// Section 3: which events are in their feeds; equivocators; each author's chains.
export function buildFeeds (events) {
  const byAuthor = new Map()
  for (const e of events.values()) push(byAuthor, e.author, e)
  const accepted = new Map()
  const parent = new Map()
  const equivocators = new Set()
  for (const [author, mine] of byAuthor) {
    const atSeq = new Map()
    const children = new Map()
    for (const e of mine) {
      push(atSeq, e.seq, e)
      if (e.prev !== null) push(children, e.prev, e)
    }
    for (const [, group] of atSeq) if (group.length > 1) equivocators.add(author)
    const stack = (atSeq.get(1) || []).filter((e) => e.prev === null)
    for (const e of stack) accepted.set(e.id, e)
    while (stack.length) {
      const e = stack.pop()
      for (const child of children.get(e.id) || []) {
        if (child.seq === e.seq + 1 && child.role === e.role && later(child, e)) {
          accepted.set(child.id, child)
          parent.set(child.id, e.id)
          stack.push(child)
        }
      }
    }
  }
  return { accepted, parent, equivocators }
}

// An author's events in its feed as chains from seq 1, one per branch tip.
function chainsOf (feeds, mine) {
  const hasChild = new Set(mine.filter((e) => feeds.parent.has(e.id)).map((e) => feeds.parent.get(e.id)))
  return mine.filter((e) => !hasChild.has(e.id)).map((tip) => {
    const chain = [tip]
    while (feeds.parent.has(chain[chain.length - 1].id)) chain.push(feeds.accepted.get(feeds.parent.get(chain[chain.length - 1].id)))
    return chain.reverse()
  })
}

function index (feeds) {
  const ix = {
    goals: [], proposals: new Map(), candidates: new Map(), claims: new Map(), results: new Map(),
    draftNumber: new Map(), resultNumber: new Map(), scorerChains: new Map()
  }
  const byAuthor = new Map()
  for (const e of feeds.accepted.values()) {
    push(byAuthor, e.author, e)
    const b = e.body
    if (b.kind === 'goal') ix.goals.push(e)
    else if (b.kind === 'proposal') push(ix.proposals, b.node, e)
    else if (b.kind === 'candidate') push(ix.candidates, b.node, e)
    else if (b.kind === 'claim') push(ix.claims, b.leaf, e)
    else if (b.kind === 'result') push(ix.results, b.leaf, e)
  }
  ix.goals.sort((a, b) => compareKeys(orderKey(a), orderKey(b)))
  for (const [author, mine] of byAuthor) {
    for (const chain of chainsOf(feeds, mine)) {
      const counts = new Map()
      const perTarget = new Map()
      for (const e of chain) {
        const b = e.body
        if (b.kind === 'proposal' || b.kind === 'result') {
          const target = b.kind === 'proposal' ? b.node : b.leaf
          counts.set(target, (counts.get(target) || 0) + 1)
          ;(b.kind === 'proposal' ? ix.draftNumber : ix.resultNumber).set(e.id, counts.get(target))
        } else if (b.kind === 'promise' || b.kind === 'ballot') push(perTarget, b.node, e)
        else if (b.kind === 'ack') push(perTarget, b.leaf, e)
      }
      if (!ix.scorerChains.has(author)) ix.scorerChains.set(author, new Map())
      for (const [target, list] of perTarget) push(ix.scorerChains.get(author), target, list)
    }
  }
  return ix
}

// Section 5: the rounds of one node or leaf. `values` maps each held value to true (a value),
// false (never one) or null (not yet known). Returns the accepted {value, round} or null.
function settleRounds (goal, node, values, candidates, chainsByScorer, held) {
  const q = goal.quorum
  const coordinator = (r) => goal.scorers[(parseInt(node.slice(0, 8), 16) + r - 1) % goal.scorers.length]
  const ballots = new Map()
  const promises = new Map()
  for (const [scorer, chains] of chainsByScorer) {
    for (const chain of chains) {
      let entered = 1
      const balloted = new Set()
      const approved = []
      for (const e of chain) {
        const b = e.body
        if (b.kind === 'promise') {
          if (b.round > entered) {
            promises.set(e.id, { scorer, round: b.round, approvedBefore: [...approved] })
            entered = b.round
          }
        } else if (b.kind === 'ballot') {
          if (balloted.has(b.round)) continue
          balloted.add(b.round)
          if (b.round >= entered) {
            const ballot = { id: e.id, scorer, round: b.round, candidate: b.candidate, approve: b.approve }
            ballots.set(e.id, ballot)
            if (b.approve) approved.push(ballot)
          }
          entered = Math.max(entered, b.round)
        }
      }
    }
  }
  // a coordinator's first candidate for (node, round) on its own chain
  const first = new Set()
  for (const e of candidates) {
    let earlier = e.prev ? held.get(e.prev) : undefined
    let repeated = false
    while (earlier) {
      if (earlier.body.kind === 'candidate' && earlier.body.node === node && earlier.body.round === e.body.round) { repeated = true; break }
      earlier = earlier.prev ? held.get(earlier.prev) : undefined
    }
    if (!repeated) first.add(e.id)
  }
  const status = new Map()
  const valueOf = new Map()
  const candidateStatus = (id, r) => {
    const e = held.get(id)
    if (!e) return 'undetermined'
    if (e.body.kind !== 'candidate' || e.body.node !== node || e.body.round !== r) return 'invalid'
    return status.get(id) || 'invalid'
  }
  const report = (promise) => {
    let best = null
    for (const ballot of promise.approvedBefore) {
      const seen = candidateStatus(ballot.candidate, ballot.round)
      if (seen === 'undetermined') return ['undetermined', null]
      if (seen === 'valid' && (best === null || ballot.round > best.round)) best = ballot
    }
    return ['valid', best]
  }
  const judge = (e) => {
    const b = e.body
    if (e.author !== coordinator(b.round) || !first.has(e.id)) return 'invalid'
    if (!held.has(b.value)) return 'undetermined'
    const eligible = values.has(b.value) ? values.get(b.value) : false
    if (eligible === null) return 'undetermined'
    if (!eligible) return 'invalid'
    valueOf.set(e.id, b.value)
    if (b.round === 1) return b.promises.length === 0 && b.certificate.length === 0 ? 'valid' : 'invalid'
    if (new Set(b.promises).size !== b.promises.length || b.promises.length < q) return 'invalid'
    const cited = []
    let missing = false
    for (const id of b.promises) {
      if (!held.has(id)) { missing = true; continue }
      const promise = promises.get(id)
      if (!promise || promise.round !== b.round) return 'invalid'
      cited.push(promise)
    }
    if (new Set(cited.map((p) => p.scorer)).size !== cited.length) return 'invalid'
    if (missing) return 'undetermined'
    const reports = []
    for (const promise of cited) {
      const [seen, best] = report(promise)
      if (seen === 'undetermined') return 'undetermined'
      if (best) reports.push(best)
    }
    if (reports.length === 0) return 'valid'
    const top = Math.max(...reports.map((r) => r.round))
    const carried = new Set(reports.filter((r) => r.round === top).map((r) => valueOf.get(r.candidate)))
    if (!carried.has(b.value)) return 'invalid'
    if (carried.size === 1) return 'valid'
    if (new Set(b.certificate).size !== b.certificate.length) return 'invalid'
    const certifiers = new Set()
    for (const id of b.certificate) {
      if (!held.has(id)) return 'undetermined'
      const ballot = ballots.get(id)
      if (!ballot || ballot.round !== top) return 'invalid'
      const seen = candidateStatus(ballot.candidate, top)
      if (seen !== 'valid') return seen
      if (valueOf.get(ballot.candidate) !== b.value) return 'invalid'
      certifiers.add(ballot.scorer)
    }
    return certifiers.size >= q ? 'valid' : 'invalid'
  }
  const ordered = [...candidates].sort((a, b) => a.body.round - b.body.round || (a.id < b.id ? -1 : 1))
  for (const e of ordered) {
    status.set(e.id, 'undetermined')
    status.set(e.id, judge(e))
  }
  const approving = new Map() // "round value" -> scorers
  for (const ballot of ballots.values()) {
    if (!ballot.approve || candidateStatus(ballot.candidate, ballot.round) !== 'valid') continue
    const key = `${String(ballot.round).padStart(4, '0')} ${valueOf.get(ballot.candidate)}`
    if (!approving.has(key)) approving.set(key, new Set())
    approving.get(key).add(ballot.scorer)
  }
  const accepted = [...approving.entries()].filter(([, s]) => s.size >= q).map(([k]) => k).sort()
  if (!accepted.length) return null
  const [round, value] = accepted[0].split(' ')
  return { value, round: Number(round) }
}

// Section 6 and 7: claims granted, the holder, and which results are values of the leaf.
function settleClaims (goal, claims, results, chainsByScorer, resultNumber) {
  const byClaim = new Map(claims.map((c) => [c.id, c]))
  const acks = new Map()
  for (const [scorer, chains] of chainsByScorer) {
    for (const chain of chains) {
      const epochs = new Set()
      for (const e of chain) {
        if (e.body.kind !== 'ack' || epochs.has(e.body.epoch)) continue
        epochs.add(e.body.epoch)
        const claim = byClaim.get(e.body.claim)
        if (claim && claim.body.epoch === e.body.epoch) {
          if (!acks.has(claim.id)) acks.set(claim.id, new Set())
          acks.get(claim.id).add(scorer)
        }
      }
    }
  }
  const granted = claims.filter((c) => (acks.get(c.id)?.size || 0) >= goal.quorum)
  let holder = null
  for (const c of granted) {
    if (!holder || c.body.epoch > holder.body.epoch || (c.body.epoch === holder.body.epoch && c.id < holder.id)) holder = c
  }
  const grantedIds = new Set(granted.map((c) => c.id))
  const eligible = new Map()
  for (const r of results) {
    const claim = byClaim.get(r.body.claim)
    if ((resultNumber.get(r.id) || 0) > MAX_RESULTS) eligible.set(r.id, false)
    else if (!claim) eligible.set(r.id, null)
    else if (claim.author !== r.author) eligible.set(r.id, false)
    else eligible.set(r.id, grantedIds.has(claim.id) ? true : null)
  }
  return { holder, eligible, byClaim }
}

export function fold (events) {
  const feeds = buildFeeds(events)
  const ix = index(feeds)
  const held = feeds.accepted
  const nodes = new Map()
  const chainsFor = (target, roster) => {
    const out = new Map()
    for (const s of roster) {
      const chains = ix.scorerChains.get(s)?.get(target)
      if (chains) out.set(s, chains)
    }
    return out
  }
  for (const goalEvent of ix.goals) {
    const goal = { id: goalEvent.id, ...goalEvent.body }
    const roster = new Set(goal.scorers)
    const stack = [{ id: goal.id, goal: goal.id, parent: null, depth: 0, title: goal.text, description: '', leaf: false }]
    while (stack.length) {
      const node = stack.pop()
      if (nodes.has(node.id)) continue
      Object.assign(node, { split: null, split_round: null, children: [], claim: null, epoch: 0, result: null })
      nodes.set(node.id, node)
      const candidates = (ix.candidates.get(node.id) || []).filter((c) => roster.has(c.author))
      const chains = chainsFor(node.id, goal.scorers)
      if (node.leaf) {
        const leaf = settleClaims(goal, ix.claims.get(node.id) || [], ix.results.get(node.id) || [], chains, ix.resultNumber)
        const outcome = settleRounds(goal, node.id, leaf.eligible, candidates, chains, held)
        if (outcome) {
          const won = leaf.byClaim.get(held.get(outcome.value).body.claim)
          Object.assign(node, { result: outcome.value, split_round: outcome.round, claim: won.id, epoch: won.body.epoch })
        } else if (leaf.holder) {
          Object.assign(node, { claim: leaf.holder.id, epoch: leaf.holder.body.epoch })
        }
        continue
      }
      const drafts = new Map((ix.proposals.get(node.id) || []).map((p) => [p.id, (ix.draftNumber.get(p.id) || 0) <= MAX_DRAFTS]))
      const outcome = settleRounds(goal, node.id, drafts, candidates, chains, held)
      if (!outcome) continue
      const winner = held.get(outcome.value)
      const children = winner.body.subgoals.map((sub, i) => ({
        id: sha256Hex(`node/${winner.id}/${i}`), goal: goal.id, parent: node.id, depth: node.depth + 1,
        title: sub.title, description: sub.description, leaf: sub.executable || node.depth + 1 >= goal.max_depth
      }))
      Object.assign(node, { split: winner.id, split_round: outcome.round, children: children.map((c) => c.id) })
      stack.push(...children.reverse())
    }
  }
  const done = (id) => {
    const n = nodes.get(id)
    return n.leaf ? n.result !== null : n.split !== null && n.children.every(done)
  }
  const record = {
    v: 3,
    events: sha256Hex([...held.keys()].sort().join('')),
    goals: ix.goals.map((g) => g.id).sort(),
    nodes: [...nodes.values()].sort((a, b) => (a.id < b.id ? -1 : 1)).map((n) => [
      n.id, n.goal, n.parent, n.depth, n.title, n.description, n.leaf, n.split, n.split_round,
      n.children, n.claim, n.epoch, n.result, done(n.id)])
  }
  return {
    digest: sha256Hex(canonical(record)),
    complete: ix.goals.length > 0 && ix.goals.every((g) => done(g.id)),
    equivocators: [...feeds.equivocators].sort(),
    nodes,
    counted: held.size
  }
}
