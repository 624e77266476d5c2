import { strict as assert } from "node:assert";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, it } from "node:test";

import { defaultTokenFile, readToken, tcpTarget } from "../tcp";

describe("tcp: address and token", () => {
  const home = os.homedir();

  it("reads HOST:PORT, a bare port and [IPv6]:PORT", () => {
    assert.deepEqual(tcpTarget("127.0.0.1:2087", "/t"), { host: "127.0.0.1", port: 2087, tokenFile: "/t" });
    assert.equal(tcpTarget("2088", "/t")?.host, "127.0.0.1");
    assert.equal(tcpTarget("[::1]:2089", "/t")?.host, "::1");
    assert.equal(tcpTarget("  ", "/t"), undefined); // blank: start a server over stdio
    assert.throws(() => tcpTarget("localhost", "/t"), /HOST:PORT/);
    assert.throws(() => tcpTarget("h:70000", "/t"), /HOST:PORT/);
  });

  it("finds the server's default token file for the port", () => {
    const runtime = fs.mkdtempSync(path.join(os.tmpdir(), "specls-run-"));
    assert.equal(defaultTokenFile(2087, { XDG_RUNTIME_DIR: runtime }), path.join(runtime, "specls", "tcp-2087.token"));
    assert.equal(defaultTokenFile(2087, {}), path.join(home, ".cache", "specls", "tcp-2087.token"));
    assert.equal(defaultTokenFile(9, { SPECLS_CACHE_DIR: "~/c" }), path.join(home, "c", "tcp-9.token"));
    assert.equal(tcpTarget("2087", "", { SPECLS_CACHE_DIR: "/x" })?.tokenFile, "/x/tcp-2087.token");
  });

  it("reads the token, or says which file it could not read", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "specls-token-"));
    const file = path.join(dir, "token");
    fs.writeFileSync(file, "abc123\n", { mode: 0o600 });
    assert.equal(readToken(file), "abc123");
    assert.throws(() => readToken(path.join(dir, "missing")), /missing.*specls serve --tcp/);
    fs.writeFileSync(file, "\n");
    assert.throws(() => readToken(file), /is empty/);
  });
});
