// Command pause is the test node's sandbox ("pause") container: the process
// that holds a pod's namespaces open. It sleeps, reaps any child that is
// re-parented to it (it is PID 1 when the pod shares one PID namespace), and
// exits 0 on SIGTERM or SIGINT so that stopping a pod is immediate.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Reap every exited child; WNOHANG stops at the first still running.
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
