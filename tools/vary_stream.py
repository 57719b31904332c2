#!/usr/bin/env python3
"""Turns a generated stream into another workload for benchmarks: more Limited Login and
random UUID event IDs, random nonces, and the IDs of real devices and users.
Usage: vary_stream.py IN OUT [--limited P] [--uuid] [--random-nonces] [--long-ids] [--seed S]

--limited P: a classic login that may be limited (not tvOS, not device_login) becomes limited
with probability P (token type, permissions and token_for_business made to fit).
--uuid: every event_id becomes a random UUID (the same for every copy of an event).
--random-nonces: every nonce becomes a name-based UUID of itself, as random-looking as the UUID an
SDK makes for each login (the generator's are `n<seed>x<event>`, which land at the end of the
log's nonce index); a nonce that recurs (a replay, a duplicate) recurs as the same UUID.
--long-ids: IDs as long as real ones, which Swift no longer stores inline (more than 15 bytes):
every device_id becomes an upper-case UUID (as iOS's identifierForVendor; a name-based UUID of
the generated ID, so a device keeps its ID) and every ASID, friends' included, gets the prefix
"10" (17 digits, as Facebook's ASIDs have)."""
import argparse, json, random, uuid

LIMITED_OK = {"public_profile", "email", "gaming_profile", "gaming_user_picture", "user_age_range", "user_birthday",
              "user_friends", "user_gender", "user_hometown", "user_link", "user_location", "user_messenger_contact"}

ap = argparse.ArgumentParser()
ap.add_argument("input")
ap.add_argument("output")
ap.add_argument("--limited", type=float, default=0.0)
ap.add_argument("--uuid", action="store_true")
ap.add_argument("--random-nonces", action="store_true")
ap.add_argument("--long-ids", action="store_true")
ap.add_argument("--seed", type=int, default=3)
a = ap.parse_args()
rng = random.Random(a.seed)
ids = {}
with open(a.input, "rb") as src, open(a.output, "w") as out:
    for raw in src:
        try:
            e = json.loads(raw)
        except ValueError:
            out.write(raw.decode("utf-8", "replace").rstrip("\n") + "\n")
            continue
        if not isinstance(e, dict):
            out.write(raw.decode("utf-8", "replace").rstrip("\n") + "\n")
            continue
        key = e.get("event_id")
        if a.uuid and isinstance(key, str):
            if key not in ids:
                ids[key] = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            e["event_id"] = ids[key]
        if a.random_nonces and isinstance(e.get("nonce"), str):
            e["nonce"] = str(uuid.uuid5(uuid.NAMESPACE_OID, e["nonce"]))
        if a.long_ids:
            if isinstance(e.get("device_id"), str):
                e["device_id"] = str(uuid.uuid5(uuid.NAMESPACE_OID, e["device_id"])).upper()
            if isinstance(e.get("asid"), str) and e["asid"].isdigit():
                e["asid"] = "10" + e["asid"]
            if isinstance(e.get("friend_asids"), list):
                e["friend_asids"] = ["10" + f if isinstance(f, str) and f.isdigit() else f for f in e["friend_asids"]]
        if (a.limited and e.get("type", "login") == "login" and e.get("tracking") == "enabled"
                and e.get("platform", "ios") != "tvos" and e.get("flow") != "device_login"):
            # Decided per event ID, so duplicates stay identical.
            if random.Random(f"{a.seed}:{key}").random() < a.limited:
                e["tracking"], e["token_type"] = "limited", "authentication_token"
                e.pop("token_for_business", None)
                if isinstance(e.get("granted_permissions"), list):
                    e["granted_permissions"] = [p for p in e["granted_permissions"] if p in LIMITED_OK]
        out.write(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n")
