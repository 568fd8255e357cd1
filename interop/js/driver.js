// Node driver of the interop harness: starts headless Chromium
// (playwright-core, driving the system's Chromium; no browser is downloaded)
// and runs scenarios, each in a fresh browser context (profile) of its own:
// it opens the page, calls window.moqtInterop(params) and prints one JSON
// object per scenario on stdout:
//
//	{"id": N, "chromium": "...", "userAgent": "...", "result": {...}, "console": [...], "pageErrors": [...]}
//
// Anything else (diagnostics) goes to stderr. A scenario that failed still
// yields its object, with driverError set: the Go test judges it.
//
// Usage:
//
//	node driver.js --chromium /usr/bin/chromium --request JSON [--timeout-ms 60000]
//	node driver.js --chromium /usr/bin/chromium --serve [--timeout-ms 60000]
//
// A request is {"id": N, "page": "http://127.0.0.1:P/", "params": {...}}; its
// params are window.moqtInterop's argument. --request runs one and exits
// (the test kills this process and its browser mid-scenario). --serve reads
// requests from stdin, one per line, and runs them as they come, several at
// once in the same browser, until stdin ends: one browser start serves a
// whole test run.
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const { values: opts } = parseArgs({
	options: {
		chromium: { type: "string", default: "/usr/bin/chromium" },
		request: { type: "string" },
		serve: { type: "boolean", default: false },
		"timeout-ms": { type: "string", default: "60000" },
	},
	strict: true,
});
if (!opts.request === !opts.serve) {
	console.error("driver: exactly one of --request and --serve is required");
	process.exit(2);
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

// runOne runs one request in a browser context of its own, so that nothing
// (connections, storage) carries over from another scenario.
async function runOne(browser, req) {
	const out = { id: req.id, chromium: browser.version(), userAgent: null, result: null, console: [], pageErrors: [] };
	let context;
	try {
		context = await browser.newContext();
		const page = await context.newPage();
		page.setDefaultTimeout(timeoutMs);
		page.on("console", (msg) => out.console.push(`${msg.type()}: ${msg.text()}`));
		page.on("pageerror", (err) => out.pageErrors.push(String(err)));
		await page.goto(req.page);
		await page.waitForFunction(() => window.moqtInteropReady === true);
		out.userAgent = await page.evaluate(() => navigator.userAgent);
		out.result = await page.evaluate((params) => window.moqtInterop(params), req.params);
	} catch (err) {
		out.driverError = String(err?.stack ?? err);
	} finally {
		if (context) await context.close().catch((err) => console.error("driver: closing the context:", err));
	}
	return out;
}

function print(out) {
	process.stdout.write(`${JSON.stringify(out)}\n`);
}

let browser;
try {
	browser = await chromium.launch({ executablePath: opts.chromium, headless: true, args, timeout: timeoutMs });
	if (opts.request) {
		print(await runOne(browser, JSON.parse(opts.request)));
	} else {
		const running = new Set();
		for await (const line of createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY })) {
			if (!line.trim()) continue;
			let req;
			try {
				req = JSON.parse(line);
			} catch (err) {
				console.error("driver: a request that is not JSON:", err);
				continue;
			}
			const p = runOne(browser, req).then(print);
			running.add(p);
			p.finally(() => running.delete(p));
		}
		await Promise.allSettled([...running]);
	}
} catch (err) {
	// The browser did not start: every request fails with this.
	print({ id: opts.request ? JSON.parse(opts.request).id : -1, driverError: String(err?.stack ?? err) });
	process.exitCode = 1;
} finally {
	if (browser) await browser.close().catch((err) => console.error("driver: closing the browser:", err));
}
