// Package browsertools finds what the browser tests run: node, the
// system's Chromium and interop/node_modules (npm ci in interop/). The
// interop harness (interop/) and the web page's tests (cmd/moqt) share it,
// so both look for the tools the same way and under the same rule: a
// missing tool skips the test, or fails it under MOQT_INTEROP=1, as
// ./scripts/test.sh sets after installing everything.
package browsertools

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// EnvInterop, set to 1, makes a missing tool a test failure instead of a
// skip.
const EnvInterop = "MOQT_INTEROP"

// EnvChromium overrides where Chromium is looked for.
const EnvChromium = "MOQT_CHROMIUM"

// Tools are the external programs and files the browser tests run.
type Tools struct {
	Interop  string // the interop directory, which holds node_modules
	Node     string
	Chromium string
	Esbuild  string
	MoqNet   string // the installed @moq/net version
}

// packages are what node_modules must hold, each at the version
// package-lock.json pins: bundles are built from them byte for byte.
var packages = []string{"@moq/net", "esbuild", "playwright-core"}

// Find locates the tools for a test of who (a word for its messages),
// interop/node_modules under interopDir. Missing ones skip t, or fail it
// under MOQT_INTEROP=1.
func Find(t testing.TB, who, interopDir string) Tools {
	t.Helper()
	required := os.Getenv(EnvInterop) == "1"
	missing := func(format string, args ...any) {
		t.Helper()
		if required {
			t.Fatalf(who+": "+format+" (%s=1 makes this a failure; ./scripts/test.sh installs everything)", append(args, EnvInterop)...)
		}
		t.Skipf(who+": "+format+"; skipping. Run ./scripts/test.sh, which installs Chromium and the npm packages and runs this test.", args...)
	}
	dir, err := filepath.Abs(interopDir)
	if err != nil {
		t.Fatal(err)
	}
	tl := Tools{Interop: dir, Esbuild: filepath.Join(dir, "node_modules", "esbuild", "bin", "esbuild")}
	if tl.Node, err = exec.LookPath("node"); err != nil {
		missing("node not found")
	}
	tl.Chromium = os.Getenv(EnvChromium)
	if tl.Chromium == "" {
		if tl.Chromium, err = exec.LookPath("chromium"); err != nil {
			tl.Chromium = "/usr/bin/chromium"
		}
	}
	if _, err := os.Stat(tl.Chromium); err != nil {
		missing("Chromium not found at %s (apt-get install chromium)", tl.Chromium)
	}
	if _, err := os.Stat(tl.Esbuild); err != nil {
		missing("node_modules/esbuild/bin/esbuild missing (npm ci in interop/)")
	}
	for _, pkg := range packages {
		installed, err := PackageVersion(filepath.Join(dir, "node_modules", pkg, "package.json"), "")
		if err != nil {
			missing("%s missing (npm ci in interop/): %v", pkg, err)
		}
		locked, err := PackageVersion(filepath.Join(dir, "package-lock.json"), "node_modules/"+pkg)
		if err != nil {
			t.Fatal(err)
		}
		if installed != locked {
			missing("interop/node_modules is stale: %s %s installed, %s locked (npm ci in interop/)", pkg, installed, locked)
		}
		if pkg == "@moq/net" {
			tl.MoqNet = installed
		}
	}
	return tl
}

// PackageVersion reads a version from a package.json, or from the entry
// key of a package-lock.json's "packages".
func PackageVersion(file, key string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var v struct {
		Version  string `json:"version"`
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	if key == "" {
		return v.Version, nil
	}
	return v.Packages[key].Version, nil
}
