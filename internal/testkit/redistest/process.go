package redistest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A process is a started redis-server. A goroutine waits for it, so that
// it is reaped as soon as it exits and exited can tell without blocking.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // from cmd.Wait; read only after done is closed
}

func (p *process) wait() {
	p.err = p.cmd.Wait()
	close(p.done)
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalAndWait sends sig and waits for the process to exit, for at most
// timeout if it is positive. It reports whether the process has exited.
func (p *process) signalAndWait(sig syscall.Signal, timeout time.Duration) bool {
	if p.exited() {
		return true
	}
	// The error is ignored: it only says the process has exited already,
	// which the wait below sees too.
	_ = p.cmd.Process.Signal(sig)
	if timeout <= 0 {
		<-p.done
		return true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// freePorts returns n distinct TCP ports of 127.0.0.1 that were free a
// moment ago. All n listeners are open at once so the ports differ.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %v", err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// readTail returns up to logTail bytes from the end of the file at path,
// starting no earlier than offset.
func readTail(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(reading log: %v)", err)
	}
	b = b[min(offset, int64(len(b))):]
	if len(b) > logTail {
		b = b[len(b)-logTail:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
		b = append([]byte("...\n"), b...)
	}
	if len(b) == 0 {
		return "(empty)"
	}
	return string(b)
}

// quoteArgs quotes the arguments that would otherwise be invisible or
// ambiguous in an error message, such as the empty value of --save.
func quoteArgs(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return q
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
