#!/usr/bin/env node
// The real gRPC client of the function-runner end-to-end tests: @grpc/grpc-js
// with @grpc/proto-loader on the project's own .proto files. It performs one
// operation and prints what happened as JSON lines on stdout; the C test
// (test_fnrunner.c) decides whether that is right. It exits 0 whenever it
// could report, 2 on bad usage, 3 when the gRPC modules do not load.
//
//   node client.js - probe
//   node client.js ADDR eval --image IMG [--exec PATH] [--in FILE | --size BYTES]
//                  [--deadline-ms MS] [--retry-not-found MS] [--repeat N] [--no-body]
//   node client.js ADDR concurrent --image IMG [--exec PATH] --in FILE [--n 64]
//   node client.js ADDR health [--service NAME]
//   node client.js ADDR raw --method /pkg.Service/Method
//
// Every operation takes --cacert FILE: then the channel speaks TLS and
// trusts that certificate (the runner's self-signed one) alone.
//
// eval prints one line per call:
//   {"code":0,"details":"","ms":3.1,"resource_list":"...","log":"...","rl_bytes":N}
// concurrent prints {"n":64,"ok":64,"same":64,"codes":{"0":64},"connections":1,"ms":..}
// where "same" counts outputs byte-identical to the input (pass-through
// functions) and "connections" the TCP connections the channel opened.
'use strict';

const fs = require('fs');
const path = require('path');

function loadGrpc() {
  try {
    return {grpc: require('@grpc/grpc-js'), loader: require('@grpc/proto-loader')};
  } catch (e) {
    process.stderr.write(`client.js: cannot load the gRPC modules: ${e.message}\n`);
    process.exit(3);
  }
}

function usage(why) {
  process.stderr.write(`client.js: ${why}\n`);
  process.exit(2);
}

function parseOptions(args) {
  const opts = {};
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (!a.startsWith('--'))
      usage(`unexpected argument ${a}`);
    const name = a.slice(2);
    if (name === 'no-body') {
      opts.noBody = true;
      continue;
    }
    if (i + 1 >= args.length)
      usage(`${a} needs a value`);
    opts[name] = args[++i];
  }
  return opts;
}

const protoDir = process.env.FUNCD_PROTO_DIR || path.join(__dirname, '..', '..', 'proto');

function loadServices(grpc, loader) {
  const options = {keepCase: true, longs: String, enums: String, defaults: true, oneofs: true};
  const def = loader.loadSync(
      [path.join(protoDir, 'evaluator.proto'), path.join(protoDir, 'health.proto')], options);
  return grpc.loadPackageDefinition(def);
}

// TLS trusting --cacert, or plaintext.
function credentialsOf(grpc, opts) {
  if (!opts.cacert)
    return grpc.credentials.createInsecure();
  return grpc.credentials.createSsl(fs.readFileSync(opts.cacert));
}

// The limits are the server's to enforce: the client takes anything, so a
// RESOURCE_EXHAUSTED seen here comes from the runner.
const channelOptions = {
  'grpc.max_receive_message_length': -1,
  'grpc.max_send_message_length': -1,
};

// A ResourceList of roughly `size` bytes: one ConfigMap holding filler.
function sizedResourceList(size) {
  const head = '{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[' +
      '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"blob":"';
  const tail = '"}}]}';
  return Buffer.from(head + 'x'.repeat(Math.max(0, size - head.length - tail.length)) + tail);
}

function requestOf(opts) {
  let rl;
  if (opts.in)
    rl = fs.readFileSync(opts.in);
  else if (opts.size)
    rl = sizedResourceList(Number(opts.size));
  else
    rl = Buffer.from('{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[]}');
  const req = {resource_list: rl, image: opts.image || ''};
  if (opts.exec)
    req.exec_path = opts.exec;
  return req;
}

function callOnce(client, req, deadlineMs) {
  const started = process.hrtime.bigint();
  const options = deadlineMs ? {deadline: new Date(Date.now() + Number(deadlineMs))} : {};
  return new Promise((resolve) => {
    client.EvaluateFunction(req, options, (err, resp) => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      if (err)
        resolve({code: err.code, details: err.details || '', ms});
      else
        resolve({code: 0, details: '', ms, resp});
    });
  });
}

function report(result, opts) {
  const line = {code: result.code, details: result.details, ms: result.ms};
  if (result.resp) {
    line.rl_bytes = result.resp.resource_list.length;
    if (!opts.noBody) {
      line.resource_list = result.resp.resource_list.toString('utf8');
      line.log = result.resp.log.toString('utf8');
    }
  }
  process.stdout.write(JSON.stringify(line) + '\n');
}

async function opEval(addr, opts) {
  const {grpc, loader} = loadGrpc();
  const pkg = loadServices(grpc, loader);
  const client = new pkg.evaluator.FunctionEvaluator(
      addr, credentialsOf(grpc, opts), channelOptions);
  const req = requestOf(opts);
  const repeat = Number(opts.repeat || 1);
  // A FunctionConfig created just before may not have reached the runner's
  // watch yet: NOT_FOUND is retried until this many ms have passed.
  const retryUntil = Date.now() + Number(opts['retry-not-found'] || 0);
  for (let i = 0; i < repeat; i++) {
    let result;
    for (;;) {
      result = await callOnce(client, req, opts['deadline-ms']);
      if (result.code !== grpc.status.NOT_FOUND || Date.now() >= retryUntil)
        break;
      await new Promise((r) => setTimeout(r, 20));
    }
    report(result, opts);
    if (opts['interval-ms'] && i + 1 < repeat)
      await new Promise((r) => setTimeout(r, Number(opts['interval-ms'])));
  }
  client.close();
}

// TCP connections of this process to `port`, read from /proc (grpc-js
// unrefs an idle connection, so node's own handle list does not show it);
// -1 where /proc cannot tell.
function connectionsTo(port) {
  try {
    const inodes = new Set();
    for (const fd of fs.readdirSync('/proc/self/fd')) {
      let target;
      try {
        target = fs.readlinkSync(`/proc/self/fd/${fd}`);
      } catch (e) {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m)
        inodes.add(m[1]);
    }
    let n = 0;
    for (const table of ['/proc/self/net/tcp', '/proc/self/net/tcp6']) {
      let text;
      try {
        text = fs.readFileSync(table, 'utf8');
      } catch (e) {
        continue;
      }
      for (const line of text.split('\n').slice(1)) {
        const f = line.trim().split(/\s+/);
        // sl local_address rem_address st ... inode (field 9); 01: ESTABLISHED
        if (f.length > 9 && f[3] === '01' && inodes.has(f[9]) &&
            parseInt(f[2].split(':')[1], 16) === port)
          n++;
      }
    }
    return n;
  } catch (e) {
    return -1;
  }
}

async function opConcurrent(addr, opts) {
  const {grpc, loader} = loadGrpc();
  const pkg = loadServices(grpc, loader);
  const client = new pkg.evaluator.FunctionEvaluator(
      addr, credentialsOf(grpc, opts), channelOptions);
  const req = requestOf(opts);
  const n = Number(opts.n || 64);
  // Connect first, so every call below starts on the same ready channel
  // rather than racing the connection setup.
  await new Promise((resolve, reject) => client.waitForReady(Date.now() + 10000,
      (err) => (err ? reject(err) : resolve())));
  const started = process.hrtime.bigint();
  const calls = [];
  for (let i = 0; i < n; i++)
    calls.push(callOnce(client, req, opts['deadline-ms'] || 60000));
  const results = await Promise.all(calls);
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  const codes = {};
  let ok = 0, same = 0;
  const firstFailure = results.find((r) => r.code !== 0);
  for (const r of results) {
    codes[r.code] = (codes[r.code] || 0) + 1;
    if (r.code === 0) {
      ok++;
      if (r.resp.resource_list.equals(req.resource_list))
        same++;
    }
  }
  const port = Number(addr.slice(addr.lastIndexOf(':') + 1));
  const line = {n, ok, same, codes, connections: connectionsTo(port), ms};
  if (firstFailure)
    line.first_failure = {code: firstFailure.code, details: firstFailure.details};
  process.stdout.write(JSON.stringify(line) + '\n');
  client.close();
}

function opHealth(addr, opts) {
  const {grpc, loader} = loadGrpc();
  const pkg = loadServices(grpc, loader);
  const client = new pkg.grpc.health.v1.Health(addr, credentialsOf(grpc, opts));
  client.Check({service: opts.service || ''}, {deadline: new Date(Date.now() + 10000)},
      (err, resp) => {
        const line = err ? {code: err.code, details: err.details || ''}
                         : {code: 0, status: resp.status};
        process.stdout.write(JSON.stringify(line) + '\n');
        client.close();
      });
}

// A call to any method, with an empty message: for paths the server does
// not serve.
function opRaw(addr, opts) {
  const {grpc} = loadGrpc();
  if (!opts.method)
    usage('raw needs --method');
  const client = new grpc.Client(addr, credentialsOf(grpc, opts));
  const identity = (b) => b;
  client.makeUnaryRequest(opts.method, identity, identity, Buffer.alloc(0),
      {deadline: new Date(Date.now() + 10000)}, (err) => {
        const line = err ? {code: err.code, details: err.details || ''} : {code: 0};
        process.stdout.write(JSON.stringify(line) + '\n');
        client.close();
      });
}

function main() {
  const [addr, op, ...rest] = process.argv.slice(2);
  if (!addr || !op)
    usage('usage: client.js ADDR OP [options]');
  const opts = parseOptions(rest);
  switch (op) {
  case 'probe':
    loadGrpc();
    process.stdout.write('{"code":0}\n');
    return;
  case 'eval':
    return opEval(addr, opts);
  case 'concurrent':
    return opConcurrent(addr, opts);
  case 'health':
    return opHealth(addr, opts);
  case 'raw':
    return opRaw(addr, opts);
  default:
    usage(`unknown operation ${op}`);
  }
}

Promise.resolve(main()).catch((e) => {
  process.stderr.write(`client.js: ${e.stack || e}\n`);
  process.exit(1);
});
