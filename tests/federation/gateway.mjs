// A real Apollo Gateway composing the subgraphs it is given, served by Apollo Server.
//
//   node gateway.mjs [--host 127.0.0.1] [--port 0] NAME=URL [NAME=URL ...]
//
// Subgraphs may also come from GATEWAY_SUBGRAPHS ("name=url,name=url").
// Each request's Authorization header is forwarded to the subgraphs, as a
// gateway in front of an authenticating subgraph must; GATEWAY_INTROSPECTION_AUTHORIZATION
// is sent with the introspection that composes the supergraph.
// On success it prints one line to stdout: {"url": "http://127.0.0.1:PORT/"}.
// If composition fails it prints {"error": "...", "errors": [...]} to stdout
// and exits with status 2, so the caller can show exactly why.
import { ApolloGateway, IntrospectAndCompose, RemoteGraphQLDataSource } from "@apollo/gateway";
import { ApolloServer } from "@apollo/server";
import { startStandaloneServer } from "@apollo/server/standalone";

function parseArgs(argv) {
  const options = { host: "127.0.0.1", port: 0, subgraphs: [] };
  const fromEnv = (process.env.GATEWAY_SUBGRAPHS ?? "").split(",").filter(Boolean);
  const specs = [...fromEnv];
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === "--host") options.host = argv[(i += 1)];
    else if (arg === "--port") options.port = Number(argv[(i += 1)]);
    else specs.push(arg);
  }
  for (const spec of specs) {
    const at = spec.indexOf("=");
    if (at <= 0) throw new Error(`subgraph must be NAME=URL, got ${JSON.stringify(spec)}`);
    options.subgraphs.push({ name: spec.slice(0, at), url: spec.slice(at + 1) });
  }
  if (options.subgraphs.length === 0) throw new Error("no subgraphs given (NAME=URL ...)");
  if (!Number.isInteger(options.port) || options.port < 0) throw new Error("bad --port");
  return options;
}

function report(payload) {
  process.stdout.write(`${JSON.stringify(payload)}\n`);
}

function describe(err) {
  const message = String(err?.message ?? err);
  // Composition failures carry one GraphQLError per problem in `causes`; some
  // gateway versions only list them as tab-indented lines of the message.
  const causes = Array.isArray(err?.causes) ? err.causes : [];
  const errors = causes.length
    ? causes.map((cause) => ({
        message: String(cause?.message ?? cause),
        code: cause?.extensions?.code ?? null,
      }))
    : message
        .split("\n")
        .filter((line) => line.startsWith("\t"))
        .map((line) => ({ message: line.trim(), code: null }));
  return { error: message.split("\n")[0], errors };
}

async function main() {
  let options;
  try {
    options = parseArgs(process.argv.slice(2));
  } catch (err) {
    report({ error: err.message, errors: [] });
    process.exit(64);
  }
  const introspectionAuthorization = process.env.GATEWAY_INTROSPECTION_AUTHORIZATION;
  const gateway = new ApolloGateway({
    supergraphSdl: new IntrospectAndCompose({
      subgraphs: options.subgraphs,
      introspectionHeaders: introspectionAuthorization
        ? { authorization: introspectionAuthorization }
        : undefined,
    }),
    buildService: ({ url }) =>
      new RemoteGraphQLDataSource({
        url,
        willSendRequest({ request, context }) {
          if (context.authorization) {
            request.http.headers.set("authorization", context.authorization);
          }
        },
      }),
  });
  const server = new ApolloServer({ gateway, introspection: true });
  let url;
  try {
    ({ url } = await startStandaloneServer(server, {
      listen: { host: options.host, port: options.port },
      context: async ({ req }) => ({ authorization: req.headers.authorization }),
    }));
  } catch (err) {
    report(describe(err));
    process.exit(2);
  }
  report({ url });
  const stop = async () => {
    await server.stop();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main();
