package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

// moqtBin is the command, built once by TestMain into binDir, which
// TestMain removes at the end.
var moqtBin, binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "moqt-cmd-")
	binDir = dir
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// build builds the command into dir, with the race detector when the test
// has it.
func build(dir string) error {
	moqtBin = filepath.Join(dir, "moqt")
	args := []string{"build", "-o", moqtBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command(goCmd(), append(args, ".")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

// goCmd is the go command of the toolchain running the test.
func goCmd() string {
	c := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(c); err != nil {
		return "go"
	}
	return c
}
