// Package interop checks the moqt server against a peer this project did not
// write: the @moq/net JavaScript library, bundled with esbuild, running in
// headless Chromium and connecting over WebTransport.
//
// The package holds tests only. Its Go test serves a page and the bundle
// over plain HTTP from 127.0.0.1 (a secure context) and starts js/driver.js,
// which runs the system's Chromium with playwright-core. Each scenario
// starts a moqt Server on 127.0.0.1 with a fresh certificate and has the
// driver open the page in a fresh browser context, which prints the
// browser's results as JSON. Both sides' observations are asserted. One
// browser serves every scenario, except the one that kills it.
//
// Every scenario runs on draft 18 and on draft 20 (TestBrowserMoqNet/draft18/…):
// our side offers only that draft, so @moq/net, which offers moqt-15 to
// moqt-20, is held to it. The cross-draft scenarios run a relay that
// accepts both, and hold each browser to its draft by the WebTransport
// protocols it offers.
//
// The scenarios: setup-only and subscribe-error (the session and a refused
// request); subscribe-objects (groups of objects published to the browser,
// checked byte for byte); largest-object and object-status (pinning how
// @moq/net 0.3.4 misreads LARGEST_OBJECT and some Object Status uses); and
// browser-killed (the browser SIGKILLed mid-stream while a Go subscriber
// reads the same track). Through a relay.Relay serving the test's server:
// relay-browser-publishes (the browser announces and publishes a broadcast
// that a Go subscriber discovers and reads through the relay),
// relay-browser-publishes-early (what the relay does with @moq/net's
// LARGEST_OBJECT, or, on 18, its lack) and relay-browser-subscribes (the
// browser discovers a Go publisher's namespace through the relay and reads
// its track). Across drafts (cross-draft/…): a browser on 18 publishes
// through the relay to a browser on 20, the reverse, and a Go publisher on
// 18 to a browser on 20. README.md's Interop section sums up what they
// found.
//
// js/ also holds the moqt command's web page script, which is no test of
// this package: js/web.js, bundled with the same @moq/net by js/build-web.js
// (npm run build:web) into cmd/moqt/web/, and js/page-driver.js, which
// cmd/moqt's browser tests steer the page with.
//
// It needs node, Chromium (/usr/bin/chromium, or $MOQT_CHROMIUM) and
// interop/node_modules (npm ci). ./scripts/test.sh installs them and sets
// MOQT_INTEROP=1, under which a missing tool fails the test; without it the
// test skips.
package interop
