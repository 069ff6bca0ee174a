// Command kubectl is the upstream kubectl, built from its Go module.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		// Print the error the way upstream kubectl does, with its exit code.
		util.CheckErr(err)
	}
	os.Exit(0)
}
