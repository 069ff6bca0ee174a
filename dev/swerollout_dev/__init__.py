"""Dev-only tooling: everything that runs a cluster on this machine, never needed by a trainer.

- `controlplane`: etcd + kube-apiserver on loopback, built from Go modules (`binaries`);
- `nodeagent`: the light node that runs pods as local processes;
- `policy_server`: the SGLang-compatible stand-in server;
- `stack`: the `swerollout dev up` supervisor;
- `tasks`, `demo`: the bundled SWE tasks and `make demo`.

The library (api, wire, store, kube, client, instances) never imports this package;
an import-linter contract in the suite says so.
"""
