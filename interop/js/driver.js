// Node driver of the interop harness: opens the page in headless Chromium
// (playwright-core, driving the system's Chromium; no browser is downloaded),
// runs one scenario and prints one JSON object on stdout:
//
//	{"chromium": "...", "userAgent": "...", "result": {...}, "console": [...], "pageErrors": [...]}
//
// Anything else (diagnostics) goes to stderr. The exit code is 0 whenever a
// result was produced, even if the scenario failed: the Go test judges it.
//
// Usage:
//
//	node driver.js --chromium /usr/bin/chromium --page http://127.0.0.1:P/ \
//	    --scenario setup-only --server https://127.0.0.1:Q/interop --cert-hash HEX \
//	    [--namespace a/b] [--track t] [--params JSON] [--timeout-ms 60000]
//
// --params is a JSON object whose fields are added to the scenario's
// parameters (window.moqtInterop's argument).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const { values: opts } = parseArgs({
	options: {
		chromium: { type: "string", default: "/usr/bin/chromium" },
		page: { type: "string" },
		scenario: { type: "string" },
		server: { type: "string" },
		"cert-hash": { type: "string" },
		namespace: { type: "string", default: "moqt-interop/missing" },
		track: { type: "string", default: "video" },
		params: { type: "string", default: "{}" },
		"timeout-ms": { type: "string", default: "60000" },
	},
	strict: true,
});
for (const name of ["page", "scenario", "server", "cert-hash"]) {
	if (!opts[name]) {
		console.error(`driver: --${name} is required`);
		process.exit(2);
	}
}
const timeoutMs = Number(opts["timeout-ms"]);

// Every host name resolves to nothing except 127.0.0.1, so that nothing the
// browser might try on its own can leave the machine.
const args = [
	"--no-sandbox", // we run as root
	"--disable-gpu",
	"--no-first-run",
	"--disable-background-networking",
	"--disable-component-update",
	"--disable-sync",
	"--disable-default-apps",
	"--disable-domain-reliability",
	"--no-pings",
	"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
];

const out = { chromium: null, userAgent: null, result: null, console: [], pageErrors: [] };
const userDataDir = await mkdtemp(join(tmpdir(), "moqt-interop-chromium-"));
let context;
try {
	// A persistent context is how a fresh --user-data-dir of our own is
	// given to Playwright; headless: true adds --headless.
	context = await chromium.launchPersistentContext(userDataDir, {
		executablePath: opts.chromium,
		headless: true,
		args,
		timeout: timeoutMs,
	});
	out.chromium = context.browser()?.version() ?? null;
	const page = context.pages()[0] ?? (await context.newPage());
	page.setDefaultTimeout(timeoutMs);
	page.on("console", (msg) => out.console.push(`${msg.type()}: ${msg.text()}`));
	page.on("pageerror", (err) => out.pageErrors.push(String(err)));
	await page.goto(opts.page);
	await page.waitForFunction(() => window.moqtInteropReady === true);
	out.userAgent = await page.evaluate(() => navigator.userAgent);
	out.result = await page.evaluate((params) => window.moqtInterop(params), {
		...JSON.parse(opts.params),
		scenario: opts.scenario,
		url: opts.server,
		certHash: opts["cert-hash"],
		namespace: opts.namespace.split("/"),
		track: opts.track,
	});
} catch (err) {
	out.driverError = String(err?.stack ?? err);
} finally {
	if (context) await context.close().catch((err) => console.error("driver: closing the browser:", err));
	await rm(userDataDir, { recursive: true, force: true });
}
process.stdout.write(`${JSON.stringify(out)}\n`);
