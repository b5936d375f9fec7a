#!/usr/bin/env node
// Starts dynalite, a DynamoDB-compatible server, on a loopback address.
//
// Unlike dynalite's own CLI, it accepts --port 0 (pick a free port) and prints
// one machine-readable line once the server accepts connections:
//
//   dynalite listening http://127.0.0.1:PORT
//
// Tests and `make dev` rely on that line instead of sleeping.
'use strict'

const dynalite = require('dynalite')

// argv holds --name value pairs; nothing else is accepted.
const argv = {}
const args = process.argv.slice(2)
for (let i = 0; i < args.length; i += 2) {
  const m = /^--([A-Za-z]+)$/.exec(args[i])
  if (!m || i + 1 >= args.length) {
    console.error(`dynalite: usage: dynalite.js [--host H] [--port N] [--path DIR] [--ccfItem true|false]`)
    process.exit(2)
  }
  argv[m[1]] = args[i + 1]
}

const host = argv.host || '127.0.0.1'

// DynamoDB answers a failed conditional write with the item as it was when
// the request asks for it (ReturnValuesOnConditionCheckFailure: ALL_OLD),
// at no read cost; dynalite drops the parameter and returns no item. Teach
// it the parameter, so code that relies on the item runs here as it does in
// production. --ccfItem false keeps dynalite's own behaviour, for testing
// the fallback of clients that must also work without the item.
if ((argv.ccfItem ?? 'true') !== 'false') {
  const db = require('dynalite/db')
  const param = {
    ReturnValuesOnConditionCheckFailure: { type: 'String', enum: ['ALL_OLD', 'NONE'] },
  }
  for (const action of ['putItem', 'updateItem', 'deleteItem']) {
    Object.assign(require(`dynalite/validations/${action}`).types, param)
  }
  const checkConditional = db.checkConditional
  db.checkConditional = function (data, existingItem) {
    const err = checkConditional(data, existingItem)
    if (err && existingItem && data.ReturnValuesOnConditionCheckFailure === 'ALL_OLD') {
      err.body.Item = existingItem
    }
    return err
  }
}
const port = argv.port === undefined ? 8000 : Number(argv.port)
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`dynalite: invalid --port ${argv.port}`)
  process.exit(2)
}

// --path keeps the tables on disk (LevelDB) instead of in memory. dynalite
// opens its database as it starts, and when another process holds it, it
// answers every request with an error ("Database is closed") instead of
// failing: check first that the store can be opened, and say why not.
async function checkPath (path) {
  const { Level } = require('level')
  const db = new Level(path)
  try {
    await db.open()
  } catch (err) {
    const cause = err.cause && err.cause.code === 'LEVEL_LOCKED'
      ? 'another process holds it (is an earlier store still running?)'
      : (err.cause || err).message
    console.error(`dynalite: cannot open the store at ${path}: ${cause}`)
    process.exit(1)
  }
  await db.close()
}

// dynalite rethrows every request stream error, so one client that goes away
// mid-request (a killed gateway, a cut connection) ends the whole server.
// Node emits 'aborted' only for a request whose body never fully arrived, so
// no operation ran for it: survive that one error and let anything else
// crash as before.
process.on('uncaughtException', (err) => {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    return
  }
  console.error(err)
  process.exit(1)
})

let server
async function main () {
  if (argv.path) {
    await checkPath(argv.path)
  }
  server = dynalite({
    createTableMs: Number(argv.createTableMs ?? 0),
    deleteTableMs: Number(argv.deleteTableMs ?? 0),
    updateTableMs: Number(argv.updateTableMs ?? 0),
    path: argv.path,
  })
  server.on('error', (err) => {
    console.error(`dynalite: ${err.message}`)
    process.exit(1)
  })
  server.listen(port, host, () => {
    const addr = server.address()
    console.log(`dynalite listening http://${host}:${addr.port}`)
  })
}
main()

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => (server ? server.close(() => process.exit(0)) : process.exit(0)))
}
