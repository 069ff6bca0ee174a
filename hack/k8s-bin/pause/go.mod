module swerollout.local/k8s-bin/pause

go 1.26.0
