// Command kubectl is the upstream kubectl, built from its Go module.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	os.Exit(cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()))
}
