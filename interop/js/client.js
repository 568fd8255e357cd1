// The browser side of the interop harness. It uses only @moq/net's public
// API: Connection.connect over WebTransport, then consume/subscribe.
//
// The page exposes window.moqtInterop(params), which the Node driver calls
// with page.evaluate; it resolves to a plain object that the driver prints as
// JSON and the Go test asserts on. It never rejects: failures are reported in
// the result.
import * as Moq from "@moq/net";

// A scenario that has not finished by then is a failure, not a hang.
const SCENARIO_TIMEOUT_MS = 15_000;

function describe(err) {
	if (err === undefined || err === null) return null;
	if (err instanceof Error) return `${err.name}: ${err.message}`;
	return String(err);
}

function withTimeout(promise, ms, what) {
	let timer;
	const timeout = new Promise((_, reject) => {
		timer = setTimeout(() => reject(new Error(`timed out after ${ms}ms: ${what}`)), ms);
	});
	return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function connect(params) {
	return await Moq.Connection.connect(new URL(params.url), {
		webtransport: {
			// Pin the server's self-signed certificate by its SHA-256 (hex).
			serverCertificateHashes: [{ algorithm: "sha-256", value: params.certHash }],
		},
		// Only WebTransport is under test: no WebSocket fallback race.
		websocket: { enabled: false },
		// Don't expect SUBSCRIBE_NAMESPACE support from the server.
		discovery: false,
		signal: AbortSignal.timeout(SCENARIO_TIMEOUT_MS),
	});
}

// setup-only: connect, which exchanges SETUPs, report what was negotiated,
// then wait for the server to close the session. Closing it from here at
// once could reach the server before our SETUP does.
async function setupOnly(params, result) {
	const conn = await connect(params);
	result.established = true;
	result.version = conn.version;
	result.transport = conn.transport;
	// Tell the test, through the page's own server, that the server's SETUP
	// has been read: only then does the server close the session, since a
	// close can discard stream data not yet read.
	await fetch("/signal/established", { method: "POST" });
	try {
		// Resolves on a clean close (WT_CLOSE_SESSION), rejects on an abrupt one.
		await withTimeout(conn.closed, SCENARIO_TIMEOUT_MS, "the server to close the session");
		result.closedCleanly = true;
	} catch (err) {
		result.closeError = describe(err);
	} finally {
		conn.close();
	}
}

// subscribe-error: SUBSCRIBE to a track the server does not have and report
// how the subscription ended.
async function subscribeError(params, result) {
	const conn = await connect(params);
	result.established = true;
	result.version = conn.version;
	result.transport = conn.transport;
	try {
		const broadcast = conn.consume(Moq.Path.from(...params.namespace));
		const track = broadcast.subscribe(params.track);
		const closedWith = await withTimeout(track.closed, SCENARIO_TIMEOUT_MS, "subscription to end");
		result.subscribeClosed = true;
		result.subscribeError = describe(closedWith);
		track.close();
		broadcast.close();
	} finally {
		conn.close();
	}
}

function hex(bytes) {
	return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function sleep(ms) {
	return new Promise((resolve) => setTimeout(resolve, ms));
}

// readGroup reads one group to its end and describes it: its sequence, each
// frame's index and payload (hex), and how the group ended: null for a FIN,
// the error for a reset or a decoding failure.
async function readGroup(group) {
	const g = { sequence: group.sequence, frames: [], error: null };
	try {
		for (;;) {
			const frame = await group.readFrameSequence();
			if (!frame) break;
			g.frames.push({ index: frame.sequence, payload: hex(frame.payload) });
		}
		g.error = describe(await group.closed);
	} catch (err) {
		g.error = describe(err);
	}
	return g;
}

// subscribe-objects: SUBSCRIBE before anything is published, so that the
// SUBSCRIBE_OK carries no LARGEST_OBJECT (which @moq/net 0.3.4 cannot
// read), then read params.groups groups, each to its end, and report them.
// The server is then told, through the page's server, that everything
// arrived; it ends the track with PUBLISH_DONE, and the page reports
// whether @moq/net noticed within params.doneWaitMs.
async function subscribeObjects(params, result) {
	const conn = await connect(params);
	result.established = true;
	result.version = conn.version;
	result.transport = conn.transport;
	result.groups = [];
	try {
		const broadcast = conn.consume(Moq.Path.from(...params.namespace));
		const track = broadcast.subscribe(params.track);
		while (result.groups.length < params.groups) {
			const group = await track.recvGroup();
			if (!group) {
				result.subscribeClosed = true;
				break;
			}
			result.groups.push(await readGroup(group));
		}
		await fetch("/signal/received", { method: "POST" });
		const ended = await Promise.race([
			Promise.resolve(track.closed).then((err) => ({ err })),
			sleep(params.doneWaitMs).then(() => null),
		]);
		if (ended) {
			result.subscribeClosed = true;
			result.subscribeError = describe(ended.err);
		}
		track.close();
		broadcast.close();
	} finally {
		conn.close();
	}
}

// receive-until-killed: subscribe and read groups for as long as the page
// lives, telling the server once the first group is complete. The test
// kills the browser meanwhile, so this never returns a result.
async function receiveUntilKilled(params, result) {
	const conn = await connect(params);
	result.established = true;
	result.groups = [];
	const broadcast = conn.consume(Moq.Path.from(...params.namespace));
	const track = broadcast.subscribe(params.track);
	for (;;) {
		const group = await track.recvGroup();
		if (!group) break;
		const g = await readGroup(group);
		result.groups.push({ sequence: g.sequence, frames: g.frames.length, error: g.error });
		if (result.groups.length === 1) await fetch("/signal/received", { method: "POST" });
	}
	conn.close();
}

const scenarios = {
	"setup-only": setupOnly,
	"subscribe-error": subscribeError,
	"subscribe-objects": subscribeObjects,
	"receive-until-killed": receiveUntilKilled,
};

window.moqtInterop = async (params) => {
	const result = {
		scenario: params.scenario,
		webTransportSupported: typeof WebTransport === "function",
		established: false,
		error: null,
	};
	const run = scenarios[params.scenario];
	if (!run) {
		result.error = `unknown scenario ${params.scenario}`;
		return result;
	}
	try {
		await withTimeout(run(params, result), SCENARIO_TIMEOUT_MS, params.scenario);
	} catch (err) {
		result.error = describe(err);
	}
	return result;
};
window.moqtInteropReady = true;
