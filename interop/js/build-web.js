// Builds the script of the moqt command's web page: js/web.js with @moq/net
// and what it imports, bundled and minified by esbuild into one ES module,
// moqt-web.js, and next to it moqt-web.js.LICENSE.txt, the license of every
// package the bundle holds. Both are committed under cmd/moqt/web/, which
// the moqt binary embeds; cmd/moqt's TestWebBundle runs this script into a
// temporary directory and fails when the committed files differ.
//
// Usage (from interop/): npm run build:web, or node js/build-web.js [--outdir DIR]
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import * as esbuild from "esbuild";

const interop = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { values: opts } = parseArgs({
	options: { outdir: { type: "string", default: join(interop, "..", "cmd", "moqt", "web") } },
	strict: true,
});

const result = await esbuild.build({
	absWorkingDir: interop,
	entryPoints: ["js/web.js"],
	bundle: true,
	format: "esm",
	target: "es2022",
	minify: true,
	// The packages' notices go to the license file below, whole.
	legalComments: "none",
	charset: "utf8",
	metafile: true,
	write: false,
	outfile: "moqt-web.js",
	logLevel: "warning",
});
const bundle = result.outputFiles[0].contents;

// The packages the bundle holds, from the inputs esbuild read: the
// innermost node_modules/NAME (or node_modules/@SCOPE/NAME) of each path.
const packages = new Map();
for (const input of Object.keys(result.metafile.inputs)) {
	const m = input.match(/^(?:.*\/)?node_modules\/((?:@[^/]+\/)?[^/]+)\//);
	if (m) packages.set(m[1], m[0].slice(0, -1));
}
if (!packages.has("@moq/net")) throw new Error("the bundle does not hold @moq/net");

// MIT's terms, for the packages that name the license in package.json but
// ship no license file.
const MIT_TERMS = `Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
`;

const esbuildVersion = JSON.parse(readFileSync(join(interop, "node_modules", "esbuild", "package.json"), "utf8")).version;
let notice = `moqt-web.js is the script of the moqt command's web page: interop/js/web.js of
github.com/moqt-go/moqt (MIT, see that repository's LICENSE) bundled with the
npm packages below by esbuild ${esbuildVersion} (npm run build:web in interop/).
Each package's license follows.
`;
for (const name of [...packages.keys()].sort()) {
	const dir = join(interop, packages.get(name));
	const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
	const repo = typeof pkg.repository === "string" ? pkg.repository : (pkg.repository?.url ?? "");
	const files = readdirSync(dir)
		.filter((f) => /^(licen[cs]e|copying)/i.test(f))
		.sort();
	notice += `\n${"=".repeat(78)}\n${pkg.name} ${pkg.version}, license ${pkg.license}${repo ? `, ${repo}` : ""}\n${"=".repeat(78)}\n\n`;
	if (files.length > 0) {
		for (const f of files) notice += `${readFileSync(join(dir, f), "utf8").trimEnd()}\n`;
	} else if (/\bMIT\b/.test(pkg.license ?? "")) {
		notice += `The package ships no license file and no copyright line; its package.json
gives the license as ${pkg.license}. It is redistributed here under the MIT
license, whose terms are:

${MIT_TERMS}`;
	} else {
		throw new Error(`${name}: no license file, and its license (${pkg.license}) is not MIT: check it may be redistributed`);
	}
}

writeFileSync(join(opts.outdir, "moqt-web.js"), bundle);
writeFileSync(join(opts.outdir, "moqt-web.js.LICENSE.txt"), notice);
console.error(`build-web: ${opts.outdir}/moqt-web.js (${bundle.length} bytes, ${packages.size} packages)`);
