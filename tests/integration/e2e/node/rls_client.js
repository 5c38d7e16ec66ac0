#!/usr/bin/env node
// A real gRPC client for tollgate's Envoy rate limit service (RLS v3) listener, as Envoy's
// ratelimit filter would call it. Used by tests/integration/e2e/test_decision.py.
//
//   node rls_client.js --target 127.0.0.1:PORT --proto src/rls/proto/rls.proto < calls.json
//
// stdin:  a JSON list of RateLimitRequests, sent one after the other on one channel, e.g.
//         [{"domain": "api", "hits_addend": 2,
//           "descriptors": [{"entries": [{"key": "api_key", "value": "sk-..."}]}]}]
// stdout: {"responses": [...]}: one RateLimitResponse per call, enums as names ("OK",
//         "OVER_LIMIT"), uint64/int64 as strings (protobuf's JSON mapping), durations as
//         {"seconds": "100", "nanos": 0}; or {"error": "..."} for a call that failed, after
//         which no further call is made. Exit code 0 when every call answered, 1 otherwise.
//         With --keep-going, a failed call's place holds {"grpc_error": CODE, "details": "..."}
//         and the next calls are made (exit code 0).
//
// Bounded: every call has a deadline (--deadline-ms, default 5000), and the whole run exits
// after --total-ms (default 30000) whatever happens.
'use strict';

const path = require('path');

function parseArgs(argv) {
  const out = {target: '', proto: '', deadlineMs: 5000, totalMs: 30000, keepGoing: false};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(a + ' needs a value');
      return argv[++i];
    };
    if (a === '--target') out.target = next();
    else if (a === '--proto') out.proto = next();
    else if (a === '--deadline-ms') out.deadlineMs = Number(next());
    else if (a === '--total-ms') out.totalMs = Number(next());
    else if (a === '--keep-going') out.keepGoing = true;
    else throw new Error('unknown argument ' + a);
  }
  if (!out.target || !out.proto) throw new Error('--target and --proto are required');
  return out;
}

function readStdin() {
  return new Promise((resolve, reject) => {
    const chunks = [];
    process.stdin.on('data', (c) => chunks.push(c));
    process.stdin.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    process.stdin.on('error', reject);
  });
}

function fail(message) {
  process.stdout.write(JSON.stringify({error: message}) + '\n');
  process.exit(1);
}

async function main() {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    fail(String(e.message || e));
  }
  const watchdog = setTimeout(() => fail('rls_client.js: gave up after ' + args.totalMs + ' ms'),
                              args.totalMs);
  watchdog.unref();

  let grpc, protoLoader;
  try {
    grpc = require('@grpc/grpc-js');
    protoLoader = require('@grpc/proto-loader');
  } catch (e) {
    fail('cannot load @grpc/grpc-js / @grpc/proto-loader (run scripts/install-node-deps.sh): ' +
         e.message);
  }
  // The well-known types (google/protobuf/duration.proto) come with proto-loader.
  const definition = protoLoader.loadSync(path.resolve(args.proto), {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(definition);
  const Service = pkg.envoy.service.ratelimit.v3.RateLimitService;
  const client = new Service(args.target, grpc.credentials.createInsecure());

  const calls = JSON.parse(await readStdin());
  if (!Array.isArray(calls)) fail('stdin must be a JSON list of RateLimitRequests');
  const responses = [];
  for (const request of calls) {
    const response = await new Promise((resolve) => {
      const deadline = new Date(Date.now() + args.deadlineMs);
      client.ShouldRateLimit(request, {deadline}, (err, res) => {
        if (err && args.keepGoing) resolve({grpc_error: err.code, details: err.details});
        else if (err) resolve({error: 'ShouldRateLimit: ' + err.code + ' ' + err.details});
        else resolve(res);
      });
    });
    if (response.error) {
      client.close();
      fail(response.error);
    }
    responses.push(response);
  }
  client.close();
  // Exit once written: a pipe takes large answers in pieces, and exit() would cut them.
  process.stdout.write(JSON.stringify({responses}) + '\n', () => process.exit(0));
}

main().catch((e) => fail(String((e && e.stack) || e)));
