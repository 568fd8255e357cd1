//go:build !unix

package interop

import (
	"errors"
	"os/exec"
)

func ownProcessGroup(*exec.Cmd) {}

func killTree(int) error { return errors.ErrUnsupported }

func canKillTree() bool { return false }
