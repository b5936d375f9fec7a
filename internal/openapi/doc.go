// Package openapi fronts a plain HTTP API described by an OpenAPI 3.x
// document as MCP tools: Load turns the document's operations into tools,
// and (*API).Call runs a tool call as one HTTP request, so the gateway can
// put such APIs behind its concurrency cap like any MCP upstream.
//
// # Loading
//
// The document comes from an http(s) URL (fetched with the configured
// client) or a file, JSON or YAML, at most Options.MaxSpecBytes. It is
// parsed and validated with github.com/getkin/kin-openapi, so OpenAPI 3.0,
// 3.1 and 3.2 are supported as far as kin-openapi supports them. Swagger
// 2.0, other versions (ErrUnsupportedVersion), unparsable and invalid
// documents are errors. Examples are not validated: they do not change how
// calls are made. $refs inside the document are resolved; external ones
// (other files, URLs) are refused.
//
// Calls go to the first server of the operation, else of its path item,
// else of the document, with server variables at their defaults; a
// relative server URL is resolved against the URL the document was fetched
// from. Options.BaseURL, if set, replaces all of them, and is required
// when there is no usable top-level server (none, or relative ones with the
// document read from a file). Every call goes to one origin, API.Origin:
// the BaseURL's, else the top-level server's. An operation whose own
// servers name another origin is skipped, so that Options.Header (the API's
// credentials) never goes to a host the document chose for one operation;
// and a reload given the origin of an earlier one (Options.Origin) fails
// with ErrOriginChanged if the document now names another.
//
// # Tools
//
// Each operation is one tool, in order of path and then method:
//
//   - Name: the operationId, as is. An operation without one, or whose
//     operationId is not a valid MCP tool name (1 to 128 of A-Z a-z 0-9 _
//     . -), is skipped; two operations with one name fail the document.
//   - Description: the summary and the description, separated by a blank
//     line, after "Deprecated." for a deprecated operation; "METHOD /path"
//     if there is neither.
//   - Annotations, from HTTP method semantics: GET, HEAD, OPTIONS and QUERY
//     are read-only; DELETE is destructive and idempotent; PUT idempotent.
//     Other methods have none (MCP's defaults: may be destructive).
//   - Input schema: a JSON Schema (2020-12) object with
//     "additionalProperties": false and one property per path, query and
//     header parameter, named as the parameter, its schema the
//     parameter's (the parameter's description, deprecated and example
//     added), listed in "required" if the parameter is required. A JSON
//     request body is the property BodyArg ("body"), whatever the body
//     schema's type, required if the request body is; the body is never
//     flattened into the arguments, so its fields cannot clash with
//     parameters.
//
// Schemas have every $ref inlined (a recursive one stops with an
// unconstrained schema carrying a $comment) and are rewritten from 3.0's
// dialect where it differs: nullable becomes a "null" type (or an anyOf
// with null), boolean exclusiveMinimum/Maximum become numbers, example
// becomes examples. readOnly properties are left out of request bodies.
// Discriminators, xml and externalDocs are dropped.
//
// Operations Call cannot serve are skipped, each listed by (*API).Skipped
// with its method, path and reason, never dropped silently: cookie
// parameters, styles other than simple (path, header) and form,
// spaceDelimited, pipeDelimited or deepObject (query), parameters with
// non-JSON content, request bodies without a JSON media type, two
// parameters with one name in different places, a parameter named "body"
// next to a request body, a path template naming no path parameter, and
// input schemas too large once $refs are inlined. Header parameters named
// Accept, Content-Type or Authorization are ignored, as the OpenAPI spec
// requires.
//
// # Calls
//
// Call checks the arguments against the tool as far as building the
// request needs: a JSON object, no unknown names, every required parameter
// and required body present (null counts as absent), values that fit their
// parameter's style (scalars; arrays and objects of scalars). Failures are
// an *ArgsError naming each argument, without values, and nothing is sent.
// Values are not validated against their schemas: the API judges them,
// and its 4xx answer reaches the caller.
//
// A call can only send what the operation declares: path parameters are
// escaped with url.PathEscape, and "." or ".." (which would change the
// path) are refused; query parameters follow their style (form with
// explode, the default, repeats the key for each array item, and sends an
// object's members as parameters of their own, which must then be
// properties the parameter's schema declares); header parameters are
// comma-joined, and control characters (CR, LF…) in them are refused; the
// body is sent as is with its media type. Accept asks for JSON;
// Options.Header is added last and wins.
//
// The response body is read up to Options.MaxResponseBytes; a longer one
// is cut there and the result text says so. Statuses map to:
//
//   - 2xx: a result whose text is the body (an image/* body is image
//     content), and whose structured content is the decoded body when it
//     is a JSON object (application/json or +json, not truncated, at most
//     MaxStructuredBytes, so a large body is not sent twice; arrays and
//     scalars stay text only: MCP clients that predate SEP-2106 accept
//     only objects there);
//   - 4xx other than 429: a result with IsError set, text "HTTP 404 Not
//     Found" and the body: the API's answer, the caller's problem;
//   - 429, 5xx, and 1xx/3xx that reach Call: a *StatusError (with the
//     Retry-After of a 429 or 503), back-pressure or an infrastructure
//     failure of the upstream;
//   - no response (connection failure, refused redirect, ctx ended): a
//     *TransportError, wrapping ctx's error if ctx ended.
//
// Errors name the tool, method and path template, never the request URL
// (its query may carry credentials) nor header values.
//
// The default client follows redirects within the same scheme and host
// only (CheckSameHost), so Options.Header never leaves for another host.
package openapi
