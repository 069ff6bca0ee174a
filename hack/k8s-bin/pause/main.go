// Command pause holds a pod sandbox's namespaces open until it is told to stop.
// No registry is reachable from these machines, so registry.k8s.io/pause cannot be
// pulled; `swerollout cluster up` packs this static binary into a FROM-scratch image
// and gives it to containerd as its sandbox_image.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is what `pause --version` prints; build.sh checks it to reuse the cache.
const version = "swerollout-pause 1"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(version)
		return
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	// As PID 1 of the sandbox it also inherits orphans; reap them so none stay zombies.
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
