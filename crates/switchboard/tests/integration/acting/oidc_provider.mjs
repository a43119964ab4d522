// A real OAuth 2.1 / OpenID Connect authorization server for the `acting` tests: panva's
// `oidc-provider` (npm, pinned by `scripts/install-test-clients.sh oidc`), on 127.0.0.1 port 0.
//
// Usage: node oidc_provider.mjs NODE_MODULES [--ttl SECONDS] [--issuer-path /PATH]
//
// Configured as an MCP server's authorization server would be: dynamic client registration
// (RFC 7591), PKCE S256 required, resource indicators (RFC 8707) with every access token a
// JWT (RFC 9068) signed RS256 by this process's own key, audience-bound to the resource the
// client asked for and living `--ttl` seconds (default 3600), refresh tokens (with
// `offline_access`), revocation (RFC 7009), introspection (RFC 7662) and `iss` in
// authorization answers (RFC 9207). Login and consent are oidc-provider's own development
// interactions: plain HTML forms (any login name is the account; the password is not
// checked), which the test's scripted browser fills in. With `--issuer-path`, the issuer has
// a path (`http://127.0.0.1:PORT/PATH`) and its endpoints live under it (its discovery document
// only at `PATH/.well-known/openid-configuration`).
//
// Prints `listening on ISSUER` once bound. `GET /test/secrets` (outside the issuer's path)
// answers every token, code, verifier, state and client secret it issued or was sent, for
// leak checks; `GET /test/log` what it did: `[{"kind", ...}]`.
import { createServer } from "node:http";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

// Stdout is the one `listening on` line the test reads (then stops reading): oidc-provider's
// notices go to stderr.
console.log = console.info = console.error;

const [nodeModules, ...rest] = process.argv.slice(2);
const flag = (name, fallback) => {
  const at = rest.indexOf(name);
  return at >= 0 ? rest[at + 1] : fallback;
};
const ttl = Number(flag("--ttl", "3600"));
const path = flag("--issuer-path", "");

const { default: Provider } = await import(
  pathToFileURL(join(nodeModules, "oidc-provider/lib/index.js")).href
);

const secrets = new Set();
const log = [];
const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
const signing = { ...privateKey.export({ format: "jwk" }), kid: "test-rs256", alg: "RS256", use: "sig" };

const server = createServer();
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}${path}`;

const provider = new Provider(issuer, {
  jwks: { keys: [signing] },
  cookies: { keys: [randomBytes(32).toString("hex")] },
  scopes: ["openid", "offline_access", "tools"],
  pkce: { required: () => true },
  ttl: {
    AccessToken: ttl,
    RefreshToken: 3600,
    AuthorizationCode: 60,
    Interaction: 600,
    Session: 3600,
    Grant: 3600,
  },
  // Whoever signs in is an account of that name.
  findAccount: (ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource) => ({
        scope: "tools",
        audience: resource,
        accessTokenTTL: ttl,
        accessTokenFormat: "jwt",
        jwt: { sign: { alg: "RS256" } },
      }),
    },
  },
});
provider.proxy = false;

// Every secret it hands out or is handed, for the tests' leak checks.
const keep = (value) => {
  if (typeof value === "string" && value.length >= 8) secrets.add(value);
};
provider.on("registration_create.success", (ctx, client) => {
  log.push({ kind: "register", clientId: client.clientId });
  keep(client.clientSecret);
});
provider.on("grant.success", (ctx) => {
  const body = ctx.body || {};
  keep(body.access_token);
  keep(body.refresh_token);
  keep(body.id_token);
  const params = ctx.oidc.params || {};
  keep(params.code);
  keep(params.code_verifier);
  keep(params.refresh_token);
  log.push({ kind: "token", grant: params.grant_type, resource: params.resource ?? null });
});
provider.on("authorization.success", (ctx) => {
  const location = ctx.response.get("location") || "";
  const code = new URL(location, issuer).searchParams.get("code");
  keep(code);
  keep(ctx.oidc.params.state);
  log.push({ kind: "authorize", resource: ctx.oidc.params.resource ?? null });
});
// A revoked refresh token ends its grant (RFC 7009 at the revocation endpoint).
provider.on("grant.revoked", () => log.push({ kind: "revoke" }));
provider.on("grant.error", (ctx, err) => log.push({ kind: "token-error", error: err.error }));

const handler = provider.callback();
server.on("request", (req, res) => {
  const send = (body) => {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify(body));
  };
  if (req.url === "/test/secrets") return send([...secrets]);
  if (req.url === "/test/log") return send(log);
  // With an issuer path, everything lives under it (mounted as `app.use(path, ...)` would).
  if (path) {
    if (!req.url.startsWith(`${path}/`)) {
      res.statusCode = 404;
      return res.end();
    }
    req.originalUrl = req.url;
    req.baseUrl = path;
    req.url = req.url.slice(path.length);
  }
  return handler(req, res);
});
process.stdout.write(`listening on ${issuer}\n`);
