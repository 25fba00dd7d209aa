// A real OpenID provider (oidc-provider) for the OAuth resource server's tests, on loopback.
//
//   node provider.mjs --keys FILE [--port N]
//
// Signs with the keys in FILE (a JWKS with private keys), made on first use: write another
// file, or delete this one, to rotate them. Prints one JSON line once it listens:
// {"issuer": "http://127.0.0.1:N"}. Clients, all with the secret "secret":
// - `machine`: client credentials; access tokens for a requested resource are JWTs (ES256)
//   for 600 s, with the scopes asked for among `echo:write tasks:read`;
// - `short`: the same, for 2 s;
// - `future`: the same, not valid before an hour from now;
// - `rsa`: the same, signed with RS256;
// - `reader`: the same, but it may ask for `tasks:read` only;
// - `opaque`: the same as `machine`, with opaque access tokens (for introspection);
// - `native`: a public client (no secret) signing users in by authorization code with PKCE,
//   redirected to a loopback address on any port (`http://127.0.0.1:PORT/callback`).
// Dynamic client registration is open, and authorization code with PKCE is served with the
// provider's own development login page (any login and password sign in).

import Provider from 'oidc-provider';
import { exportJWK, generateKeyPair } from 'jose';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';

function arg(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? process.argv[at + 1] : fallback;
}

const port = Number(arg('port', '0'));
const keysFile = arg('keys');
if (!keysFile) {
  console.error('--keys FILE is required');
  process.exit(2);
}

async function makeKeys() {
  const keys = [];
  for (const alg of ['ES256', 'RS256']) {
    const { privateKey } = await generateKeyPair(alg, { extractable: true });
    const jwk = await exportJWK(privateKey);
    jwk.alg = alg;
    jwk.use = 'sig';
    jwk.kid = `${alg.toLowerCase()}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
    keys.push(jwk);
  }
  return { keys };
}

if (!existsSync(keysFile)) {
  writeFileSync(keysFile, JSON.stringify(await makeKeys()), { mode: 0o600 });
}
const jwks = JSON.parse(readFileSync(keysFile, 'utf8'));

const SCOPES = 'echo:write tasks:read';
const clients = ['machine', 'short', 'future', 'rsa', 'reader', 'opaque'].map((client_id) => ({
  client_id,
  client_secret: 'secret',
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
  scope: client_id === 'reader' ? 'tasks:read' : SCOPES,
}));
clients.push({
  client_id: 'native',
  application_type: 'native',
  token_endpoint_auth_method: 'none',
  grant_types: ['authorization_code', 'refresh_token'],
  redirect_uris: ['http://127.0.0.1/callback'],
  response_types: ['code'],
});

// The port is known only once the server listens; the issuer names it.
const server = (await import('node:http')).createServer();
await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients,
  jwks,
  scopes: ['openid', 'offline_access', ...SCOPES.split(' ')],
  features: {
    clientCredentials: { enabled: true },
    registration: { enabled: true },
    introspection: { enabled: true },
    revocation: { enabled: true },
    devInteractions: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource, client) => ({
        scope: SCOPES,
        audience: resource,
        accessTokenTTL: client.clientId === 'short' ? 2 : 600,
        accessTokenFormat: client.clientId === 'opaque' ? 'opaque' : 'jwt',
        jwt: { sign: { alg: client.clientId === 'rsa' ? 'RS256' : 'ES256' } },
      }),
    },
  },
  formats: {
    customizers: {
      jwt: (ctx, token, jwt) => {
        if (token.clientId === 'future') {
          jwt.payload.nbf = Math.floor(Date.now() / 1000) + 3600;
        }
      },
    },
  },
  pkce: { required: () => true },
});
provider.proxy = false;

server.on('request', provider.callback());
process.stdout.write(`${JSON.stringify({ issuer })}\n`);
// Stdout carries that one line: the tests stop reading it then. The provider's notices
// (console.info) go to stderr instead, and a closed stdout is no reason to stop.
console.info = (...args) => console.error(...args);
process.stdout.on('error', () => {});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
