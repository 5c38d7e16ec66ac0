#!/usr/bin/env node
// grpc.health.v1.Health/Check against tollgate's RLS listener, as a Kubernetes gRPC probe or an
// Envoy health check would ask. Used by tests/integration/e2e/test_decision.py.
//
//   node health_client.js --target 127.0.0.1:PORT [--service NAME]
//
// stdout: {"status": "SERVING"} (or NOT_SERVING, SERVICE_UNKNOWN), or {"error": "..."}; exit 0
// when the call answered. Bounded: a 5 s deadline.
'use strict';

const path = require('path');

function done(out, code) {
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(code);
}

function main() {
  const argv = process.argv.slice(2);
  let target = '';
  let service = '';
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--target' && i + 1 < argv.length) target = argv[++i];
    else if (argv[i] === '--service' && i + 1 < argv.length) service = argv[++i];
    else done({error: 'unknown argument ' + argv[i]}, 1);
  }
  if (!target) done({error: '--target is required'}, 1);
  const grpc = require('@grpc/grpc-js');
  const protoLoader = require('@grpc/proto-loader');
  const definition = protoLoader.loadSync(path.join(__dirname, 'health.proto'),
                                          {keepCase: true, enums: String, defaults: true});
  const Health = grpc.loadPackageDefinition(definition).grpc.health.v1.Health;
  const client = new Health(target, grpc.credentials.createInsecure());
  const deadline = new Date(Date.now() + 5000);
  client.Check({service}, {deadline}, (err, res) => {
    client.close();
    if (err) done({error: 'Check: ' + err.code + ' ' + err.details}, 1);
    done({status: res.status}, 0);
  });
}

main();
