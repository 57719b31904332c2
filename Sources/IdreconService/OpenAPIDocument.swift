/// `schemas/openapi.yaml`, served at `/v1/openapi.yaml` (a test checks the two are the same
/// bytes: the binary carries no resource files).
enum OpenAPIDocument {
    static let text = #"""
openapi: 3.1.0
info:
  title: idrecon read API
  version: 0.9.0
  description: >-
    Ask before you call: the Graph-API access state of ASIDs, identities, devices and link
    chains, from idrecon's projections. Every /v1 answer says how far the projections are
    (applied_seq, projection_lag_events). With a token file, every /v1 request needs
    Authorization: Bearer TOKEN (401 otherwise); /healthz stays open.
servers:
  - url: http://127.0.0.1:8080
security:
  - bearer: []
paths:
  /healthz:
    get:
      security: []
      responses:
        '200': {description: alive, content: {application/json: {schema: {type: object, required: [status], properties: {status: {type: string}}}}}}
  /v1/openapi.yaml:
    get:
      responses:
        '200': {description: this document, content: {application/yaml: {schema: {}}}}
        '401': {$ref: '#/components/responses/Unauthorized'}
  /v1/access/{asid}:
    get:
      parameters:
        - {name: asid, in: path, required: true, schema: {$ref: '#/components/schemas/ASID'}}
        - {name: at, in: query, required: false, description: judge at this time (RFC 3339), schema: {type: string, format: date-time}}
      responses:
        '200': {description: the access state (unseen is an answer, not a 404), content: {application/json: {schema: {$ref: '#/components/schemas/AccessAnswer'}}}}
        '400': {$ref: '#/components/responses/BadRequest'}
        '401': {$ref: '#/components/responses/Unauthorized'}
  /v1/access:
    post:
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              required: [asids]
              properties:
                asids: {type: array, maxItems: 10000, items: {$ref: '#/components/schemas/ASID'}}
                at: {type: [string, 'null'], format: date-time, description: RFC 3339; absent or null means now}
      responses:
        '200':
          description: the answers, in request order
          content:
            application/json:
              schema:
                allOf:
                  - {$ref: '#/components/schemas/Position'}
                  - type: object
                    required: [results]
                    properties:
                      results: {type: array, items: {$ref: '#/components/schemas/Access'}}
        '400': {$ref: '#/components/responses/BadRequest'}
        '401': {$ref: '#/components/responses/Unauthorized'}
        '413': {description: more than 10,000 ASIDs, or a body over 1 MiB, content: {application/json: {schema: {$ref: '#/components/schemas/Error'}}}}
  /v1/users/{asid}:
    get:
      parameters:
        - {name: asid, in: path, required: true, schema: {$ref: '#/components/schemas/ASID'}}
      responses:
        '200':
          description: the identity the ASID belongs to
          content:
            application/json:
              schema:
                allOf:
                  - {$ref: '#/components/schemas/Position'}
                  - type: object
                    required: [user_id, members, keys, ambiguous_keys]
                    properties:
                      user_id: {type: string}
                      members:
                        type: array
                        items:
                          type: object
                          required: [asid, first_login_at, access]
                          properties:
                            asid: {type: string}
                            first_login_at: {type: string}
                            access: {$ref: '#/components/schemas/State'}
                      keys: {type: array, items: {type: string}}
                      ambiguous_keys:
                        type: array
                        items:
                          type: object
                          required: [key, reason, asids]
                          properties: {key: {type: string}, reason: {type: string}, asids: {type: integer}}
        '401': {$ref: '#/components/responses/Unauthorized'}
        '404': {$ref: '#/components/responses/NotFound'}
  /v1/devices/{app_id}/{device_id}:
    get:
      parameters:
        - {name: app_id, in: path, required: true, schema: {type: string}}
        - {name: device_id, in: path, required: true, schema: {type: string}}
      responses:
        '200':
          description: the device
          content:
            application/json:
              schema:
                allOf:
                  - {$ref: '#/components/schemas/Position'}
                  - type: object
                    required: [app_id, device_id, mode, asid, anomalies, logins, logouts, first_at, last_at, last_event_id]
                    properties:
                      app_id: {type: string}
                      device_id: {type: string}
                      mode: {type: string, enum: [enabled, limited, logged_out]}
                      asid: {type: [string, 'null']}
                      anomalies: {type: integer}
                      logins: {type: integer}
                      logouts: {type: integer}
                      first_at: {type: string}
                      last_at: {type: string}
                      last_event_id: {type: string}
        '401': {$ref: '#/components/responses/Unauthorized'}
        '404': {$ref: '#/components/responses/NotFound'}
  /v1/explain/{a}/{b}:
    get:
      parameters:
        - {name: a, in: path, required: true, schema: {$ref: '#/components/schemas/ASID'}}
        - {name: b, in: path, required: true, schema: {$ref: '#/components/schemas/ASID'}}
      responses:
        '200':
          description: the chain of shared keys that makes a and b one identity
          content:
            application/json:
              schema:
                allOf:
                  - {$ref: '#/components/schemas/Position'}
                  - type: object
                    required: [steps]
                    properties:
                      steps:
                        type: array
                        items:
                          type: object
                          required: [step, from, key, to, from_event, to_event]
                          properties:
                            step: {type: integer}
                            from: {type: string}
                            key: {type: string}
                            to: {type: string}
                            from_event: {type: string}
                            to_event: {type: string}
        '401': {$ref: '#/components/responses/Unauthorized'}
        '404': {$ref: '#/components/responses/NotFound'}
components:
  securitySchemes:
    bearer: {type: http, scheme: bearer}
  schemas:
    ASID: {type: string, pattern: '^[0-9]{1,32}$'}
    State: {type: string, enum: [allowed, forbidden_limited, forbidden_unknown, unseen]}
    Position:
      type: object
      required: [applied_seq, projection_lag_events]
      properties:
        applied_seq: {type: integer, description: the last logged event the projections have folded}
        projection_lag_events: {type: integer, description: logged events not folded yet}
    Access:
      type: object
      required: [asid, state, as_of, evidence_event, evidence_device]
      properties:
        asid: {type: string}
        state: {$ref: '#/components/schemas/State'}
        as_of: {type: string, description: RFC 3339, or "now"}
        evidence_event: {type: [string, 'null']}
        evidence_device: {type: [string, 'null'], description: app_id/device_id}
    AccessAnswer:
      allOf:
        - {$ref: '#/components/schemas/Access'}
        - {$ref: '#/components/schemas/Position'}
    Error:
      type: object
      required: [error, status]
      properties: {error: {type: string}, status: {type: integer}}
  responses:
    BadRequest: {description: a malformed ASID, time or body, content: {application/json: {schema: {$ref: '#/components/schemas/Error'}}}}
    Unauthorized: {description: no valid bearer token, content: {application/json: {schema: {$ref: '#/components/schemas/Error'}}}}
    NotFound: {description: no such identity, device or link, content: {application/json: {schema: {$ref: '#/components/schemas/Error'}}}}
"""#
}
