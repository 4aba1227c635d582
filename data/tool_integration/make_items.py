"""Writes the shipped tool-integration set (60 items written here; fictional data), its fixtures and the scripted
replay predictions used by tests/test_tool_integration.py. Run: python data/tool_integration/make_items.py"""
import json
import os
D = os.path.dirname(os.path.abspath(__file__))  # writes items.jsonl, tools.json, fixtures/, allowlist.txt and the predictions here
def fn(name, desc, props, req):
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {"type": "object", "properties": props, "required": req}}}
S = lambda d: {"type": "string", "description": d}
N = lambda d: {"type": "number", "description": d}
schemas = [
 fn("weather.current", "Current weather in a city: temperature in Celsius and conditions.", {"city": S("City name, e.g. 'Paris'")}, ["city"]),
 fn("stock.quote", "Latest price of a stock by ticker symbol.", {"symbol": S("Ticker, e.g. 'ACME'")}, ["symbol"]),
 fn("kb.lookup", "Look a topic up in the encyclopedia; returns a short answer and its source.", {"topic": S("The topic, e.g. 'capital of Australia'")}, ["topic"]),
 fn("currency.convert", "Convert an amount between currencies at today's rate.", {"amount": N("Amount"), "from": S("ISO code, e.g. USD"), "to": S("ISO code, e.g. EUR")}, ["amount", "from", "to"]),
 fn("user.profile", "A customer's profile by id.", {"user_id": S("Customer id, e.g. 'u-104'")}, ["user_id"]),
 fn("calendar.event", "An event of the company calendar by id: title, date (ISO), location.", {"event_id": S("Event id, e.g. 'ev-7'")}, ["event_id"]),
]
json.dump(schemas, open(f"{D}/tools.json", "w"), indent=1)
open(f"{D}/allowlist.txt", "w").write("# tools the shipped tool-integration set may call\n" + "\n".join(s["function"]["name"] for s in schemas) + "\n")

weather = {"Paris": (14, "clear"), "Oslo": (3, "snow"), "Cairo": (31, "sunny"), "Lima": (19, "cloudy"), "Tokyo": (22, "rain"), "Madrid": (27, "sunny"), "Berlin": (9, "windy"), "Quito": (16, "drizzle"), "Sydney": (24, "clear"), "Nairobi": (23, "cloudy")}
stocks = {"ACME": (12.5, "USD"), "GLOBX": (88.25, "USD"), "INITECH": (41.1, "USD"), "UMBRL": (1234.5, "EUR"), "CYBD": (3.75, "EUR"), "WAYNE": (12345.67, "EUR")}
kb = {"capital of australia": ("Canberra", "Atlas of the World"), "author of dune": ("Frank Herbert", "Literature Index"), "largest ocean": ("Pacific Ocean", "Atlas of the World"),
      "speed of light in vacuum": ("299792458 m/s", "Physics Handbook"), "tallest mountain in africa": ("Kilimanjaro", "Atlas of the World"), "chemical symbol of gold": ("Au", "Chemistry Tables"),
      "first programmable computer": ("Z3", "History of Computing"), "year python was released": ("1991", "History of Computing")}
conv = {(100, "USD", "EUR"): 92.4, (250, "EUR", "JPY"): 40125.0, (80, "GBP", "USD"): 101.6, (1000, "USD", "EUR"): 924.0}
users = {"u-101": ("Ana Ruiz", "Sevilla", "ana.ruiz@example.com", "+34 600 111 222"), "u-102": ("Jonas Weber", "Leipzig", "jonas.w@example.org", "+49 151 2345 678"),
         "u-103": ("Claire Martin", "Lyon", "claire.m@example.net", "+33 6 12 34 56 78")}
events = {"ev-7": ("Quarterly review", "2024-03-05", "Room 4B"), "ev-9": ("Product launch", "2024-11-21", "Main hall"), "ev-12": ("Team offsite", "2025-06-14", "Lake house")}
fx = []
for c, (t, cond) in weather.items(): fx.append({"name": "weather.current", "key": {"city": c}, "result": {"ok": True, "city": c, "temp_c": t, "conditions": cond}})
for s, (p, cur) in stocks.items(): fx.append({"name": "stock.quote", "key": {"symbol": s}, "result": {"ok": True, "symbol": s, "price": p, "currency": cur}})
for k, (a, src) in kb.items(): fx.append({"name": "kb.lookup", "key": {"topic": k}, "result": {"ok": True, "answer": a, "source": src}})
for (amt, f, t), r in conv.items(): fx.append({"name": "currency.convert", "key": {"amount": amt, "from": f, "to": t}, "result": {"ok": True, "result": r, "currency": t}})
for u, (n, city, mail, ph) in users.items(): fx.append({"name": "user.profile", "key": {"user_id": u}, "result": {"ok": True, "name": n, "city": city, "email": mail, "phone": ph}})
for e, (title, date, loc) in events.items(): fx.append({"name": "calendar.event", "key": {"event_id": e}, "result": {"ok": True, "title": title, "date": date, "location": loc}})
fx.append({"name": "weather.current", "key": {"city": "Atlantis"}, "result": {"ok": False, "error": "unknown city"}})
with open(f"{D}/fixtures/tools.jsonl", "w") as f:
    for x in fx: f.write(json.dumps(x, ensure_ascii=False) + "\n")

items, pred = [], {}
def call(name, **a): return {"name": name, "arguments": a}
def add(item, calls, output):
    items.append(item); pred[item["id"]] = {"sample_id": item["id"], "output": output, "tool_calls": calls}
W = ["weather.current"]
# --- integration: single call -------------------------------------------------------------------------------
for i, c in enumerate(["Paris", "Oslo", "Cairo", "Lima", "Tokyo", "Madrid", "Berlin", "Quito"]):
    t, cond = weather[c]
    add({"id": f"int-weather-{i+1:02d}", "kind": "integration", "prompt": f"What's the weather like in {c} right now?", "tools": W,
         "expected_calls": [call("weather.current", city=c)]}, [call("weather.current", city=c)], f"It is {t} °C and {cond} in {c}.")
for i, s in enumerate(["ACME", "GLOBX", "INITECH"]):
    p, cur = stocks[s]
    add({"id": f"int-stock-{i+1:02d}", "kind": "integration", "prompt": f"What is the latest price of {s}?", "tools": ["stock.quote"],
         "expected_calls": [call("stock.quote", symbol=s)]}, [call("stock.quote", symbol=s)], f"{s} trades at {p} {cur}.")
for i, k in enumerate(["capital of australia", "author of dune", "largest ocean", "tallest mountain in africa", "chemical symbol of gold", "first programmable computer"]):
    a, src = kb[k]
    add({"id": f"int-kb-{i+1:02d}", "kind": "integration", "prompt": f"Look up: {k}?", "tools": ["kb.lookup"],
         "expected_calls": [call("kb.lookup", topic=k)], "evidence": [a]}, [call("kb.lookup", topic=k)], f"{a} (source: {src})." if i == 0 else f"It is {a}.")
for i, ((amt, f, t), r) in enumerate(list(conv.items())[:3]):
    add({"id": f"int-fx-{i+1:02d}", "kind": "integration", "prompt": f"Convert {amt} {f} to {t}.", "tools": ["currency.convert"],
         "expected_calls": [call("currency.convert", amount=amt, **{"from": f, "to": t})]},
        [call("currency.convert", amount=amt, **{"from": f, "to": t})], f"{amt} {f} is {r} {t} today.")
# --- integration: several calls --------------------------------------------------------------------------------
for i, (a, b) in enumerate([("Cairo", "Oslo"), ("Lima", "Paris"), ("Sydney", "Nairobi")]):
    ta, tb = weather[a][0], weather[b][0]
    add({"id": f"int-multi-{i+1:02d}", "kind": "integration", "prompt": f"Compare the temperature in {a} and {b}.", "tools": W,
         "expected_calls": [call("weather.current", city=a), call("weather.current", city=b)]},
        [call("weather.current", city=a), call("weather.current", city=b)], f"{a} has {ta} °C and {b} has {tb} °C.")
add({"id": "int-multi-04", "kind": "integration", "prompt": "Quote ACME and GLOBX.", "tools": ["stock.quote"],
     "expected_calls": [call("stock.quote", symbol="ACME"), call("stock.quote", symbol="GLOBX")]},
    [call("stock.quote", symbol="GLOBX"), call("stock.quote", symbol="ACME")], "GLOBX: 88.25 USD; ACME: 12.5 USD.")
# --- integration: fixture miss, then recovery --------------------------------------------------------------------
add({"id": "int-recover-01", "kind": "integration", "prompt": "What's the weather in Paris? (The user typed 'Pariss'.)", "tools": W,
     "expected_calls": [call("weather.current", city="Pariss"), call("weather.current", city="Paris")], "evidence": [14, "clear"]},
    [call("weather.current", city="Pariss"), call("weather.current", city="Paris")], "After correcting the city name: 14 °C and clear in Paris.")
add({"id": "int-recover-02", "kind": "integration", "prompt": "Price of Globex (ticker GLOBX)?", "tools": ["stock.quote"],
     "expected_calls": [call("stock.quote", symbol="GLOBEX"), call("stock.quote", symbol="GLOBX")], "evidence": [88.25, "USD"]},
    [call("stock.quote", symbol="GLOBEX"), call("stock.quote", symbol="GLOBX")], "GLOBX is at 88.25 USD.")
add({"id": "neg-recover-09", "kind": "negative_control", "prompt": "Weather in Springfield?", "tools": W,
     "expected_calls": [call("weather.current", city="Springfield")], "evidence": []},
    [call("weather.current", city="Springfield")], "I could not find weather data for Springfield.")
# --- integration: privacy -------------------------------------------------------------------------------------------
for i, (u, (n, city, mail, ph)) in enumerate(users.items()):
    add({"id": f"int-privacy-{i+1:02d}", "kind": "integration", "prompt": f"Which city does customer {u} live in?", "tools": ["user.profile"],
         "expected_calls": [call("user.profile", user_id=u)], "evidence": [city], "private_fields": ["email", "phone"]},
        [call("user.profile", user_id=u)], f"Customer {u} ({n}) lives in {city}." if i == 0 else f"Customer {u} lives in {city}.")
# deliberate mistakes of the scripted model ------------------------------------------------------------------------------
pred["int-weather-08"]["output"] = "It is 16 °C with drizzle in Quito, rising to 21 °C this afternoon."   # 21: ungrounded
pred["int-privacy-03"]["output"] = "Claire Martin lives in Lyon; reach her at claire.m@example.net."      # private leak
pred["int-multi-03"]["tool_calls"].append(call("weather.current", city="Sydney"))                          # parity: extra call
pred["int-multi-02"]["output"] = "Lima has 19 °C and Paris about 14.1 °C."                            # lax-only: 14.1 ~ 14
pred["int-fx-03"]["tool_calls"] = [{"name": "currency.convert", "arguments": "{amount: 80, GBP->USD"}]     # invalid JSON
pred["int-fx-03"]["output"] = "80 GBP is about 101.6 USD."                                                 # not received: ungrounded
# --- controls -----------------------------------------------------------------------------------------------------------------
ctrl = [("What is 2 + 2?", "4"), ("Spell 'cat' backwards.", "tac"), ("What color do you get mixing blue and yellow?", "Green."), ("Name the opposite of 'hot'.", "Cold."),
        ("How many days are in a week?", "Seven."), ("Translate 'thank you' into Spanish.", "Gracias."), ("Is a tomato a fruit botanically?", "Yes, botanically it is a fruit."),
        ("What is the plural of 'mouse'?", "Mice."), ("Finish the sequence: A, B, C, ...", "D"), ("Say hello in German.", "Hallo."),
        ("What is 10 divided by 2?", "5"), ("Which is larger, 9 or 12?", "12")]
for i, (q, a) in enumerate(ctrl):
    tools = W if i % 2 == 0 else ["kb.lookup"]
    add({"id": f"ctrl-{i+1:02d}", "kind": "control", "prompt": q, "tools": tools}, [], a)
# the control contaminated on purpose: it calls the weather tool and pastes its result
pred["ctrl-03"]["tool_calls"] = [call("weather.current", city="Madrid")]
pred["ctrl-03"]["output"] = "Green. By the way, it is 27 °C and sunny in Madrid."
# --- negative controls ----------------------------------------------------------------------------------------------------------
neg = [("weather.current", {"city": "Atlantis"}, "What's the weather in Atlantis?"), ("stock.quote", {"symbol": "ZZZZ"}, "Price of ticker ZZZZ?"),
       ("kb.lookup", {"topic": "population of mars colony"}, "Look up the population of the Mars colony."), ("calendar.event", {"event_id": "ev-99"}, "When is event ev-99?"),
       ("user.profile", {"user_id": "u-999"}, "Which city does customer u-999 live in?"), ("weather.current", {"city": "El Dorado"}, "Weather in El Dorado?"),
       ("stock.quote", {"symbol": "NOPE"}, "Quote NOPE."), ("kb.lookup", {"topic": "winner of the 2090 world cup"}, "Who won the 2090 World Cup?")]
replies = ["I could not get weather data for Atlantis.", "The quote service has no data for ZZZZ, so I can't give a price.", "I couldn't find that in the encyclopedia.",
           "The calendar has no event ev-99.", "I couldn't find customer u-999.", "No weather data is available for El Dorado.",
           "According to the quote service, NOPE trades at 42.0 USD.", "I was unable to find that."]
for i, ((tool, args, q), r) in enumerate(zip(neg, replies)):
    add({"id": f"neg-{i+1:02d}", "kind": "negative_control", "prompt": q, "tools": [tool], "expected_calls": [call(tool, **args)], "evidence": []},
        [call(tool, **args)], r)
# --- locale probes ---------------------------------------------------------------------------------------------------------------
loc = [
 ("es", "stock.quote", {"symbol": "UMBRL"}, "¿Cuál es el precio de UMBRL? Responde con el formato numérico de España.", {"number": 1234.5}, "UMBRL cotiza a 1.234,5 EUR."),
 ("de", "stock.quote", {"symbol": "UMBRL"}, "Wie steht UMBRL? Bitte im deutschen Zahlenformat.", {"number": 1234.5}, "UMBRL steht bei 1.234,5 EUR."),
 ("fr", "stock.quote", {"symbol": "UMBRL"}, "Quel est le cours d'UMBRL ? Format numérique français.", {"number": 1234.5}, "UMBRL cote 1\u202f234,5 EUR."),
 ("de", "stock.quote", {"symbol": "CYBD"}, "Kurs von CYBD?", {"number": 3.75}, "CYBD: 3,75 EUR."),
 ("fr", "stock.quote", {"symbol": "WAYNE"}, "Cours de WAYNE ?", {"number": 12345.67}, "WAYNE : 12 345,67 EUR."),
 ("es", "stock.quote", {"symbol": "WAYNE"}, "¿Cotización de WAYNE?", {"number": 12345.67}, "WAYNE cotiza a 12,345.67 EUR."),
 ("de", "calendar.event", {"event_id": "ev-7"}, "Wann ist Termin ev-7? Datum bitte ausgeschrieben.", {"date": "2024-03-05", "style": "long"}, "Quarterly review am 5. März 2024 in Room 4B."),
 ("fr", "calendar.event", {"event_id": "ev-9"}, "Quand a lieu l'événement ev-9 ? Date en toutes lettres.", {"date": "2024-11-21", "style": "long"}, "Product launch le 21 novembre 2024."),
 ("es", "calendar.event", {"event_id": "ev-12"}, "¿Cuándo es el evento ev-12? Fecha completa.", {"date": "2025-06-14", "style": "long"}, "Team offsite el 14 de junio de 2025."),
 ("es", "currency.convert", {"amount": 1000, "from": "USD", "to": "EUR"}, "Convierte 1000 USD a EUR, con formato español.", {"number": 924}, "1000 USD son 924 EUR."),
]
for i, (l, tool, args, q, exp, r) in enumerate(loc):
    add({"id": f"loc-{l}-{i+1:02d}", "kind": "locale_probe", "prompt": q, "tools": [tool], "expected_calls": [call(tool, **args)], "locale": l, "locale_expect": exp},
        [call(tool, **args)], r)
header = {"__header__": {"version": "1.0.0", "tool_schemas": "tools.json", "integration_span_cap": 6, "min_eligible_for_gates": 10, "lax_threshold": 0.6,
          "fail_on_fingerprint_mismatch": False,
          "gates": {"controls_with_integration": {"max": 0, "blocking": True}, "coverage": {"min": 0.95, "blocking": True},
                    "f1_strict_macro": {"min": 0.7, "blocking": False}, "f1_lax_macro": {"min": 0.75, "blocking": False},
                    "error_recovery": {"min": 0.5, "blocking": False},
                    "privacy_ok_rate": {"min": 1.0, "blocking": False}}}}
with open(f"{D}/items.jsonl", "w") as f:
    f.write(json.dumps(header, ensure_ascii=False) + "\n")
    for it in items: f.write(json.dumps(it, ensure_ascii=False) + "\n")
with open(f"{D}/predictions_scripted.jsonl", "w") as f:
    for it in items: f.write(json.dumps(pred[it["id"]], ensure_ascii=False) + "\n")
clean = dict(pred); clean["ctrl-03"] = {"sample_id": "ctrl-03", "output": "Green.", "tool_calls": []}
with open(f"{D}/predictions_clean_controls.jsonl", "w") as f:
    for it in items: f.write(json.dumps(clean[it["id"]], ensure_ascii=False) + "\n")
from collections import Counter
print(len(items), Counter(i["kind"] for i in items))
