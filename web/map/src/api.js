// The page's only ways to the server: one POST for a query, one
// graphql-transport-ws socket for the live subscription, both carrying the
// bearer token when there is one (in the socket's connection_init payload,
// where the server reads it, as GraphiQL's Headers tab does).
import { createClient } from "graphql-ws";

const TOKEN_KEY = "gpugraph.map.token";
// Closing codes that mean "who are you?": 4401 refused at the upgrade, 4403
// no or a failing token in connection_init.
const AUTH_CLOSE_CODES = new Set([4401, 4403]);

/** Raised when the server wants a (different) token. */
export class AuthRequired extends Error {}

export const token = {
  get() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  },
  set(value) {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  },
};

function authHeaders() {
  const value = token.get();
  return value ? { Authorization: `Bearer ${value}` } : {};
}

/** POST one query; the response, unread (see ``answer``). */
export function send(path, document, operationName, variables = undefined) {
  return fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json", ...authHeaders() },
    body: JSON.stringify({ query: document, operationName, variables }),
  });
}

/** POST one query; its JSON result with data, AuthRequired on 401, Error on anything else. */
export function query(path, document, operationName, variables = undefined) {
  return answer(send(path, document, operationName, variables));
}

/** The JSON result of a query ``send`` posted, read as ``query`` reads it. */
export async function answer(sent) {
  const response = await sent;
  if (response.status === 401) {
    const body = await response.json().catch(() => ({}));
    throw new AuthRequired(body.error || "the server wants a bearer token");
  }
  const body = await response.json().catch(() => null);
  // Without data: a GraphQL error, or the server's own JSON error (a 503
  // while the Kubernetes API server cannot check tokens).
  if (!body?.data) {
    const message = body?.errors?.map((e) => e.message).join("; ") || body?.error || response.statusText;
    throw new Error(`${response.status}: ${message}`);
  }
  return body;
}

function isUnauthenticated(errors) {
  return Array.isArray(errors) && errors.some((e) => e?.extensions?.code === "UNAUTHENTICATED");
}

/**
 * Subscribe to ``document``; calls ``onResult`` with every tick's result,
 * ``onState`` with "connecting" | "live" | "closed", ``onAuth`` when the
 * server refuses the token, and ``onEnd`` when the server ends the
 * subscription. Reconnects with a capped backoff. Returns a stop().
 */
export function subscribe(path, document, variables, { onResult, onState, onAuth, onError, onEnd }) {
  const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  const client = createClient({
    url: `${scheme}//${window.location.host}${path}`,
    connectionParams: authHeaders,
    lazy: true,
    retryAttempts: Infinity,
    shouldRetry: (event) => !AUTH_CLOSE_CODES.has(event?.code),
    retryWait: (retries) =>
      new Promise((resolve) => setTimeout(resolve, Math.min(10, 2 ** retries) * 1000 + Math.random() * 500)),
    on: {
      connecting: () => onState("connecting"),
      connected: () => onState("live"),
      closed: () => onState("closed"),
    },
  });
  const stop = client.subscribe(
    { query: document, variables, operationName: "ClusterMapLive" },
    {
      // A token revoked mid-subscription ends it with a last result whose
      // errors say UNAUTHENTICATED, not with a closed socket.
      next: (result) => (isUnauthenticated(result.errors) ? onAuth() : onResult(result)),
      error: (error) => {
        if (AUTH_CLOSE_CODES.has(error?.code) || isUnauthenticated(error)) onAuth();
        else onError(error);
      },
      complete: onEnd,
    },
  );
  return () => {
    stop();
    client.dispose();
  };
}
