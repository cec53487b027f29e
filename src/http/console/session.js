// The bearer token: kept in sessionStorage only, decoded (not verified) to show who it is for.

const KEY = "planfiles.token";

export const FILES = {
  "integration-file": { read: "jit.integrations.read", write: "jit.integrations.write" },
  "configuration-file": { read: "jit.preferences.read", write: "jit.preferences.write" },
};

function b64url(part) {
  const b64 = part.replace(/-/g, "+").replace(/_/g, "/");
  const bin = atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4));
  return new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
}

/** The claims of a JWT, or throws an Error saying why it is not one. */
export function decode(token) {
  const parts = token.split(".");
  if (parts.length !== 3 || parts.some((p) => !/^[A-Za-z0-9_-]*$/.test(p)) || !parts[1]) {
    throw new Error("This is not a JWT (three base64url parts separated by dots).");
  }
  let claims;
  try {
    claims = JSON.parse(b64url(parts[1]));
  } catch {
    throw new Error("The token's payload is not base64url-encoded JSON.");
  }
  if (!claims || typeof claims !== "object") throw new Error("The token's payload is not a JSON object.");
  if (typeof claims.tenant_id !== "string") throw new Error("The token has no tenant_id claim.");
  if (typeof claims.exp !== "number") throw new Error("The token has no exp (expiry) claim.");
  return claims;
}

/** A signed-in session: the token and what its claims allow. */
export class Session {
  constructor(token) {
    this.token = token;
    this.claims = decode(token);
    this.tenant = this.claims.tenant_id;
    this.permissions = Array.isArray(this.claims.permissions) ? this.claims.permissions.map(String) : [];
    this.expires = new Date(this.claims.exp * 1000);
  }
  canWrite(file) {
    return this.permissions.includes(FILES[file].write);
  }
  canRead(file) {
    return this.canWrite(file) || this.permissions.includes(FILES[file].read);
  }
  expired() {
    return Date.now() >= this.expires.getTime();
  }
}

export function stored() {
  try {
    return sessionStorage.getItem(KEY);
  } catch {
    return null;
  }
}

export function store(token) {
  sessionStorage.setItem(KEY, token);
}

export function forget() {
  sessionStorage.removeItem(KEY);
}
