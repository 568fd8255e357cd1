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
	await fetch("/established", { method: "POST" });
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

const scenarios = {
	"setup-only": setupOnly,
	"subscribe-error": subscribeError,
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
