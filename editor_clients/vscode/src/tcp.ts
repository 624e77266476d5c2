// Connecting to a running `specls serve --tcp` instead of starting a server: the address, the server's
// token file (the first message must carry its token, see the server's docs/configuration.md) and the socket.
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

export interface TcpTarget {
  host: string;
  port: number;
  tokenFile: string;
}

type Env = Record<string, string | undefined>;

/** `specls serve --tcp --port PORT`'s default token file (lsp_server/auth.py). */
export function defaultTokenFile(port: number, env: Env = process.env): string {
  const runtime = env.XDG_RUNTIME_DIR;
  if (runtime && fs.existsSync(runtime) && fs.statSync(runtime).isDirectory()) {
    return path.join(runtime, "specls", `tcp-${port}.token`);
  }
  const configured = env.SPECLS_CACHE_DIR;
  const cache = configured ? configured.replace(/^~(?=$|\/)/, os.homedir()) : path.join(os.homedir(), ".cache", "specls");
  return path.join(cache, `tcp-${port}.token`);
}

/** `HOST:PORT` (or a bare port, on 127.0.0.1) from the `specls.tcp` setting; undefined when it is blank. */
export function tcpTarget(address: string, tokenFile: string, env: Env = process.env): TcpTarget | undefined {
  const trimmed = address.trim();
  if (trimmed === "") {
    return undefined;
  }
  const match = /^(?:(.+):)?(\d{1,5})$/.exec(trimmed);
  const port = match ? Number(match[2]) : NaN;
  if (!match || port < 1 || port > 65535) {
    throw new Error(`specls.tcp must be HOST:PORT, for example 127.0.0.1:2087; got ${JSON.stringify(address)}`);
  }
  const host = (match[1] ?? "127.0.0.1").replace(/^\[(.*)\]$/, "$1");
  return { host, port, tokenFile: tokenFile.trim() || defaultTokenFile(port, env) };
}

/** The token the server wrote; an error that names the file when it cannot be read. */
export function readToken(tokenFile: string): string {
  let token: string;
  try {
    token = fs.readFileSync(tokenFile, "utf8").trim();
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(`cannot read the specls token file ${tokenFile} (is \`specls serve --tcp\` running?): ${reason}`);
  }
  if (!token) {
    throw new Error(`the specls token file ${tokenFile} is empty`);
  }
  return token;
}

/** A connected socket, as vscode-languageclient's StreamInfo. */
export function connect(target: TcpTarget): Promise<{ reader: net.Socket; writer: net.Socket }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(target.port, target.host);
    socket.once("connect", () => resolve({ reader: socket, writer: socket }));
    socket.once("error", reject);
  });
}
