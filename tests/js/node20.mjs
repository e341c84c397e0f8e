// Node 20 lacks Promise.withResolvers (Node 22 has it), which a transitive dependency of
// libp2p 2.x (it-queue, through mortice) calls. Imported first, before libp2p.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers () {
    let resolve, reject
    const promise = new this((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}
