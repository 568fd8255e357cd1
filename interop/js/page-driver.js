// A Node driver for a web page in headless Chromium (playwright-core, driving
// the system's Chromium; no browser is downloaded), steered step by step by
// a test: cmd/moqt's TestWebPage, for the page of moqt relay -web.
//
// It reads one JSON command a line on stdin and answers each with one JSON
// line on stdout, {"id": N, "ok": true, ...} or {"id": N, "error": "..."}.
// The page's console messages and errors come as {"event": "console" |
// "pageerror", "text": "..."} lines in between. At the end of stdin it
// closes the browser and exits.
//
// Commands, each with an "id" and a "timeoutMs" bounding its waits:
//
//	{"op": "open", "url": U}                       open the page; answers {"chromium": version}
//	{"op": "fill", "selector": S, "value": V}      type V into the input S, replacing what it holds
//	{"op": "press", "selector": S, "key": K}       press K (such as "Enter") in S
//	{"op": "wait", "selector": S, "text": T}       wait for an element S whose text holds T ("" for any)
//	{"op": "text", "selector": S}                  answers {"texts": [...]}, each S's text
//	{"op": "attr", "selector": S, "name": A}       answers {"value": ...}, S's attribute A
//
// Usage: node page-driver.js --chromium /usr/bin/chromium
import { createInterface } from "node:readline";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const { values: opts } = parseArgs({
	options: { chromium: { type: "string", default: "/usr/bin/chromium" } },
	strict: true,
});

function send(msg) {
	process.stdout.write(`${JSON.stringify(msg)}\n`);
}

// As interop/js/driver.js: no host name resolves but 127.0.0.1, so nothing
// the browser tries on its own leaves the machine.
const args = [
	"--no-sandbox",
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

const userDataDir = await mkdtemp(join(tmpdir(), "moqt-web-chromium-"));
let context;
let page;

async function open(cmd) {
	context = await chromium.launchPersistentContext(userDataDir, {
		executablePath: opts.chromium,
		headless: true,
		args,
		timeout: cmd.timeoutMs,
	});
	page = context.pages()[0] ?? (await context.newPage());
	page.on("console", (msg) => send({ event: "console", text: `${msg.type()}: ${msg.text()}` }));
	page.on("pageerror", (err) => send({ event: "pageerror", text: String(err) }));
	await page.goto(cmd.url, { timeout: cmd.timeoutMs });
	return { chromium: context.browser()?.version() ?? null };
}

const ops = {
	open,
	async fill(cmd) {
		await page.fill(cmd.selector, cmd.value, { timeout: cmd.timeoutMs });
		return {};
	},
	async press(cmd) {
		await page.press(cmd.selector, cmd.key, { timeout: cmd.timeoutMs });
		return {};
	},
	async wait(cmd) {
		await page.waitForFunction(
			({ selector, text }) => [...document.querySelectorAll(selector)].some((el) => el.textContent.includes(text)),
			{ selector: cmd.selector, text: cmd.text ?? "" },
			{ timeout: cmd.timeoutMs },
		);
		return {};
	},
	async text(cmd) {
		return { texts: await page.$$eval(cmd.selector, (els) => els.map((el) => el.textContent)) };
	},
	async attr(cmd) {
		return { value: await page.getAttribute(cmd.selector, cmd.name, { timeout: cmd.timeoutMs }) };
	},
};

// Commands run one at a time, in order.
let queue = Promise.resolve();
const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
	queue = queue.then(async () => {
		let cmd;
		try {
			cmd = JSON.parse(line);
			const op = ops[cmd.op];
			if (!op) throw new Error(`no op ${cmd.op}`);
			if (cmd.op !== "open" && !page) throw new Error("no page open");
			send({ id: cmd.id, ok: true, ...(await op(cmd)) });
		} catch (err) {
			send({ id: cmd?.id ?? null, error: String(err?.message ?? err) });
		}
	});
});
lines.on("close", () => {
	queue = queue.then(async () => {
		if (context) await context.close().catch((err) => console.error("page-driver: closing the browser:", err));
		await rm(userDataDir, { recursive: true, force: true });
	});
});
