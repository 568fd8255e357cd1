// The browser side of the interop harness. It uses only @moq/net's public
// API: Connection.connect over WebTransport, then consume/subscribe,
// announced (namespace discovery) and publish.
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
	const webtransport = {
		// Pin the server's self-signed certificate by its SHA-256 (hex).
		serverCertificateHashes: [{ algorithm: "sha-256", value: params.certHash }],
	};
	// params.protocols, if set, replaces @moq/net's offer (moqt-15..20 and
	// its moq-lite ones): connectWebTransport spreads these options after
	// its own protocols list, so the browser offers only the given drafts.
	if (params.protocols) webtransport.protocols = params.protocols;
	return await Moq.Connection.connect(new URL(params.url), {
		webtransport,
		// Only WebTransport is under test: no WebSocket fallback race.
		websocket: { enabled: false },
		// Don't expect SUBSCRIBE_NAMESPACE support from the server.
		discovery: false,
		signal: AbortSignal.timeout(SCENARIO_TIMEOUT_MS),
	});
}

// connected connects and reports the session in result.
async function connected(params, result) {
	const conn = await connect(params);
	result.established = true;
	result.version = conn.version;
	result.transport = conn.transport;
	return conn;
}

// setup-only: connect, which exchanges SETUPs, report what was negotiated,
// then wait for the server to close the session. Closing it from here at
// once could reach the server before our SETUP does.
async function setupOnly(params, result) {
	const conn = await connected(params, result);
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
	const conn = await connected(params, result);
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

// discover asks for the namespaces under prefix (SUBSCRIBE_NAMESPACE) and
// waits for want among them, reporting each event in result.announced. It
// returns the namespace subscription, still open.
async function discover(conn, prefix, want, result) {
	result.announced = [];
	const announced = conn.announced(prefix);
	for (;;) {
		const entry = await announced.next();
		if (!entry) throw new Error("the namespace subscription ended before the namespace was announced");
		result.announced.push({ path: entry.path, active: entry.active });
		if (entry.active && Moq.Path.join(prefix, entry.path) === want) return announced;
	}
}

// subscribe-objects: SUBSCRIBE before anything is published, so that the
// SUBSCRIBE_OK carries no LARGEST_OBJECT (which @moq/net 0.3.4 cannot
// read), then read params.groups groups, each to its end, and report them.
// With params.prefix, the namespace is first discovered under it. The
// server is then told, through the page's server, that everything
// arrived; it ends the track with PUBLISH_DONE, and the page reports
// whether @moq/net noticed within params.doneWaitMs.
async function subscribeObjects(params, result) {
	const conn = await connected(params, result);
	result.groups = [];
	let announced;
	try {
		const path = Moq.Path.from(...params.namespace);
		if (params.prefix) announced = await discover(conn, Moq.Path.from(...params.prefix), path, result);
		const broadcast = conn.consume(path);
		const track = broadcast.subscribe(params.track);
		while (result.groups.length < params.groups) {
			const group = await track.recvGroup();
			if (!group) {
				result.subscribeClosed = true;
				break;
			}
			result.groups.push(await readGroup(group));
		}
		await signal("received");
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
		announced?.close();
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

// gate waits until the test opens the gate of that name (GET /gate/{name}
// on the page's own server returns once it has).
async function gate(name) {
	const resp = await fetch(`/gate/${name}`);
	if (!resp.ok) throw new Error(`gate ${name}: HTTP ${resp.status}`);
}

function signal(name) {
	return fetch(`/signal/${name}`, { method: "POST" });
}

// objectPayload is object o of group g, as the Go test's objectPayload makes
// it: sizes from one byte to several QUIC packets, bytes that depend on the
// group, the object and the offset.
const OBJECT_SIZES = [1, 100, 1500, 20000];
function objectPayload(g, o) {
	const b = new Uint8Array(OBJECT_SIZES[o]);
	for (let i = 0; i < b.length; i++) b[i] = (g * 67 + o * 29 + i * 13 + (i >> 8)) & 0xff;
	return b;
}

// publish-broadcast: publish a broadcast at params.namespace, which @moq/net
// announces with PUBLISH_NAMESPACE. Its track is served on request (not
// created up front), so that the page learns when a SUBSCRIBE arrives; it
// writes nothing until the test says the subscription is Established, so
// that @moq/net's SUBSCRIBE_OK carries no LARGEST_OBJECT (which it codes
// with a length prefix the spec does not have). Then it writes
// params.groups groups of OBJECT_SIZES.length objects, waits for the test
// to have them, ends the track (PUBLISH_DONE), withdraws the broadcast and
// closes the session when told.
async function publishBroadcast(params, result) {
	const conn = await connected(params, result);
	try {
		const broadcast = new Moq.Broadcast.Producer();
		conn.publish(Moq.Path.from(...params.namespace), broadcast);
		const request = await broadcast.requested();
		if (!request) throw new Error("the broadcast closed before any track was requested");
		result.requestedTracks = [request.name];
		const track = request.accept();
		await signal("requested");
		await gate("publish");
		for (let g = 0; g < params.groups; g++) {
			const group = track.appendGroup();
			for (let o = 0; o < OBJECT_SIZES.length; o++) {
				group.writeFrame({ payload: objectPayload(group.sequence, o), timestamp: Moq.Time.Timestamp.now() });
			}
			group.close();
		}
		result.published = params.groups;
		await gate("received");
		track.close();
		broadcast.close();
		await signal("withdrawn");
		await gate("close");
	} finally {
		conn.close();
	}
}

// publish-early: publish a broadcast whose track already holds a group
// (created up front, written before anyone asks), so that @moq/net's
// SUBSCRIBE_OK carries LARGEST_OBJECT (on draft 20; on 18 it leaves it
// out). The page then waits for the session to end, which the test expects
// the server to do on draft 20, or, with params.closeGate, for the test to
// open the gate "close", and then closes it itself.
async function publishEarly(params, result) {
	const conn = await connected(params, result);
	try {
		const broadcast = new Moq.Broadcast.Producer();
		const track = broadcast.createTrack(params.track);
		const group = track.appendGroup();
		for (let o = 0; o < OBJECT_SIZES.length; o++) {
			group.writeFrame({ payload: objectPayload(group.sequence, o), timestamp: Moq.Time.Timestamp.now() });
		}
		group.close();
		result.published = 1;
		conn.publish(Moq.Path.from(...params.namespace), broadcast);
		const told = params.closeGate ? gate("close").then(() => "told") : new Promise(() => {});
		try {
			const how = await withTimeout(Promise.race([conn.closed, told]), SCENARIO_TIMEOUT_MS - 2000, "the server to close the session");
			if (how !== "told") result.closedCleanly = true;
		} catch (err) {
			result.closeError = describe(err);
		}
	} finally {
		conn.close();
	}
}

const scenarios = {
	"setup-only": setupOnly,
	"subscribe-error": subscribeError,
	"subscribe-objects": subscribeObjects,
	"receive-until-killed": receiveUntilKilled,
	"publish-broadcast": publishBroadcast,
	"publish-early": publishEarly,
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
