"""`swerollout cluster up`: a real single-node Kubernetes on this machine.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
kube-proxy (built from Go modules by hack/k8s-bin/build.sh) with containerd, runc
and the CNI bridge plugin from Debian packages. It is the second embedded mode
beside `swerollout dev up` (which runs our own node agent instead of a kubelet).
See docs/real-node.md.
"""
