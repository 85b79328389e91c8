// Polling applications on pg-boss and graphile-worker, the node twins of tests/owntable/job_apps.py:
// the same plan (triggers, intervals, tenants: the seeded generator below matches its shape, not
// its numbers), a job per trigger that re-arms itself at its own due time plus its interval, the
// trigger's id and tenant inside the job's JSON data. The schemas are created by the libraries.
//
// The connection comes from the environment only (PGHOST, PGPORT, PGDATABASE, PGUSER and, when the
// server wants one, PGPASSWORD), which node's pg driver reads itself: never the command line.
//
//   node apps.mjs pg-boss|graphile-worker TRIGGERS LOW..HIGH TENANTS OUT.json
// prints "ready" once armed, writes OUT.json then and again, with the fires counted, on SIGTERM.

import { renameSync, writeFileSync } from 'node:fs'

const [library, triggersArg, everyArg, tenantsArg, out] = process.argv.slice(2)
const [lo, hi] = everyArg.split('..').map(Number)

// a small seeded generator (mulberry32), so a run's plan is the same every time
let seed = 11
function random () {
  seed = (seed + 0x6D2B79F5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const start = Date.now() / 1000
const triggers = []
for (let i = 0; i < Number(triggersArg); i++) {
  const every = lo + Math.floor(random() * (hi - lo + 1))
  const tenant = `tenant-${String(Math.min(Math.floor(1 / Math.pow(1 - random(), 1 / 1.1)), Number(tenantsArg))).padStart(2, '0')}`
  triggers.push({ trigger_id: `trigger-${String(i).padStart(4, '0')}`, tenant, every, phase: start + 0.5 + random() * (every - 0.5) })
}
// every first due time moved to when the library is ready, so no trigger starts late
function startAt (at) {
  const first = Math.min(...triggers.map(t => t.phase)) - 0.5
  for (const t of triggers) t.phase += at - first
}
const byId = new Map(triggers.map(t => [t.trigger_id, t]))
const dues = new Map()
let fires = 0

function fired (triggerId, due) {
  fires++
  if (!dues.has(triggerId)) dues.set(triggerId, [])
  dues.get(triggerId).push(due)
}

function median (xs) {
  const s = [...xs].sort((a, b) => a - b)
  const m = Math.floor(s.length / 2)
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

function figures () {
  const tenants = new Map()
  for (const t of triggers) tenants.set(t.tenant, (tenants.get(t.tenant) || 0) + 1)
  const armed = triggers.map(t => {
    const d = [...(dues.get(t.trigger_id) || [])].sort((a, b) => a - b)
    const gaps = d.slice(1).map((x, i) => x - d[i])
    return gaps.length ? median(gaps) : t.every
  })
  return {
    triggers: triggers.length,
    planned_rate_per_s: triggers.reduce((a, t) => a + 1 / t.every, 0),
    planned_intervals_s: triggers.map(t => t.every).sort((a, b) => a - b),
    rate_per_s: armed.reduce((a, x) => a + 1 / x, 0),
    intervals_s: armed.sort((a, b) => a - b),
    tenants: tenants.size,
    tenant_sizes: [...tenants.values()].sort((a, b) => b - a),
    fires,
    dues: Object.fromEntries([...dues].map(([k, v]) => [k, [...v].sort((a, b) => a - b)]))
  }
}

function write () {
  writeFileSync(out + '.tmp', JSON.stringify(figures(), null, 2) + '\n')
  renameSync(out + '.tmp', out) // whole, for a reader polling it
}

function data (t) {
  return { trigger_id: t.trigger_id, tenant: t.tenant, every: t.every }
}

async function pgBoss () {
  const { default: PgBoss } = await import('pg-boss')
  const boss = new PgBoss({ max: 4 }) // host, port, database, user, password: from PG* variables
  boss.on('error', e => console.error(e))
  await boss.start()
  await boss.createQueue('poll')
  startAt(Date.now() / 1000 + 1)
  for (const t of triggers) await boss.send('poll', data(t), { startAfter: new Date(t.phase * 1000) })
  // includeMetadata: each job's own start_after, so the next one is due exactly one interval later
  await boss.work('poll', { pollingIntervalSeconds: 0.5, batchSize: 50, includeMetadata: true }, async jobs => {
    for (const job of jobs) {
      const t = byId.get(job.data.trigger_id)
      const due = job.startAfter.getTime() / 1000
      fired(t.trigger_id, due)
      await boss.send('poll', data(t), { startAfter: new Date((due + t.every) * 1000) })
    }
  })
  return () => boss.stop({ graceful: true, wait: true, timeout: 5000 })
}

async function graphileWorker () {
  const { run } = await import('graphile-worker')
  const { default: pg } = await import('pg')
  const pgPool = new pg.Pool({ max: 6 }) // from PG* variables
  pgPool.on('error', e => console.error('pool error', e))
  const runner = await run({
    pgPool,
    concurrency: 6,
    pollInterval: 200,
    noHandleSignals: true,
    taskList: {
      poll: async (payload, helpers) => {
        const t = byId.get(payload.trigger_id)
        if (helpers.job.attempts > 1) console.error(`retry of ${t.trigger_id}: ${helpers.job.last_error}`)
        const due = helpers.job.run_at.getTime() / 1000
        fired(t.trigger_id, due)
        await helpers.addJob('poll', data(t), { runAt: new Date((due + t.every) * 1000) })
      }
    }
  })
  startAt(Date.now() / 1000 + 1)
  for (const t of triggers) await runner.addJob('poll', data(t), { runAt: new Date(t.phase * 1000) })
  return async () => { await runner.stop(); await pgPool.end() }
}

const stop = await ({ 'pg-boss': pgBoss, 'graphile-worker': graphileWorker })[library]()
write()
setInterval(write, 1000) // so a test can wait until every trigger has fired
console.log('ready')
let stopping = false
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, async () => {
    if (stopping) return
    stopping = true
    await stop()
    write()
    process.exit(0)
  })
}
