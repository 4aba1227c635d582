"""Writes the BFCL-format sample (items written here, in the layout of the gorilla repository: BFCL_v4_<category>.json
and possible_answer/), the scripted replay predictions and the verdict BFCL's rules give each (expected.jsonl).
Run: python data/bfcl_sample/make_sample.py"""
import json, os
D = os.path.dirname(os.path.abspath(__file__))  # writes the BFCL-format files, predictions.jsonl and expected.jsonl here
def fn(name, desc, props, required):
    return {"name": name, "description": desc, "parameters": {"type": "dict", "properties": props, "required": required}}
S = lambda d: {"type": "string", "description": d}
I = lambda d: {"type": "integer", "description": d}
F = lambda d: {"type": "float", "description": d}
tri = fn("calculate_triangle_area", "Calculate the area of a triangle from its base and height.",
         {"base": I("The base of the triangle."), "height": I("The height of the triangle."), "unit": S("The unit of measure (default 'units').")}, ["base", "height"])
fact = fn("math.factorial", "Calculate the factorial of a number.", {"number": I("The number.")}, ["number"])
dist = fn("geo.distance", "Driving distance between two cities.", {"origin": S("Start city, e.g. 'Boston, MA'."), "destination": S("End city."), "unit": S("'miles' or 'km'. Default miles.")}, ["origin", "destination"])
vel = fn("physics.velocity", "Average velocity from distance and time.", {"distance": F("Distance in meters."), "time": F("Time in seconds.")}, ["distance", "time"])
hyp = fn("math.hypot", "Euclidean norm sqrt(x*x + y*y (+ z*z)).", {"x": I("x coordinate."), "y": I("y coordinate."), "z": I("z coordinate (default 0).")}, ["x", "y"])
wea = fn("weather.forecast", "Weather forecast for a city.", {"city": S("City name."), "days": I("Number of days to forecast (default 1).")}, ["city"])
mean = fn("stats.mean", "Arithmetic mean of numbers.", {"numbers": {"type": "array", "items": {"type": "float"}, "description": "The numbers."}}, ["numbers"])
hotel = fn("hotel.book", "Book a hotel room.", {"location": S("City of the hotel."), "room": {"type": "dict", "description": "Room request.", "properties": {"type": S("Room type."), "nights": I("Number of nights."), "breakfast": {"type": "boolean", "description": "Breakfast included."}}}}, ["location", "room"])
def q(text): return [[{"role": "user", "content": text}]]
simple = [
 (q("Find the area of a triangle with a base of 10 units and height of 5 units."), [tri], [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]),
 (q("Calculate the factorial of 5."), [fact], [{"math.factorial": {"number": [5]}}]),
 (q("How far is it to drive from New York City, NY to Los Angeles, CA?"), [dist], [{"geo.distance": {"origin": ["New York City, NY", "NYC"], "destination": ["Los Angeles, CA", "LA"], "unit": ["miles", ""]}}]),
 (q("A runner covers 100 meters in 20 seconds. What is the average velocity?"), [vel], [{"physics.velocity": {"distance": [100.0], "time": [20.0]}}]),
 (q("Compute the hypotenuse of a right triangle with legs 4 and 5."), [hyp], [{"math.hypot": {"x": [4], "y": [5], "z": ["", 0]}}]),
 (q("What's the weather in Paris for the next 3 days?"), [wea], [{"weather.forecast": {"city": ["Paris", "Paris, France"], "days": [3]}}]),
 (q("Give me a 3-day forecast for Paris."), [wea], [{"weather.forecast": {"city": ["Paris", "Paris, France"], "days": [3]}}]),
 (q("What is the mean of 1.5, 2.5 and 3.0?"), [mean], [{"stats.mean": {"numbers": [[1.5, 2.5, 3.0]]}}]),
 (q("Book a deluxe room in Rome for 3 nights."), [hotel], [{"hotel.book": {"location": ["Rome", "Rome, Italy"], "room": [{"type": ["deluxe"], "nights": [3], "breakfast": ["", True]}]}}]),
 (q("Forecast for Paris over the next 3 days, please."), [wea], [{"weather.forecast": {"city": ["Paris"], "days": [3]}}]),
 (q("What is 5 factorial?"), [fact], [{"math.factorial": {"number": [5]}}]),
 (q("Velocity for 100 meters covered in 20 seconds?"), [vel], [{"physics.velocity": {"distance": [100.0], "time": [20.0]}}]),
]
circle = fn("geometry.circle_area", "Area of a circle.", {"radius": I("The radius."), "units": S("Units (default 'cm').")}, ["radius"])
tprops = fn("triangle_properties.get", "Area and perimeter of a triangle from its three sides.", {"side1": I("First side."), "side2": I("Second side."), "side3": I("Third side.")}, ["side1", "side2", "side3"])
multiple = [
 (q("What is the area of a circle with radius 5?"), [tprops, circle], [{"geometry.circle_area": {"radius": [5], "units": ["", "cm"]}}]),
 (q("Properties of a triangle with sides 3, 4 and 5?"), [tprops, circle], [{"triangle_properties.get": {"side1": [3], "side2": [4], "side3": [5]}}]),
]
play = fn("spotify.play", "Play tracks of an artist for some minutes.", {"artist": S("The artist."), "duration": I("Minutes to play.")}, ["artist", "duration"])
pq = q("Play Taylor Swift for 20 minutes and Maroon 5 for 15 minutes on Spotify.")
pans = [{"spotify.play": {"artist": ["Taylor Swift"], "duration": [20]}}, {"spotify.play": {"artist": ["Maroon 5"], "duration": [15]}}]
parallel = [(pq, [play], pans), (pq, [play], pans), (pq, [play], pans)]
som = fn("math_toolkit.sum_of_multiples", "Sum of the multiples of the given numbers within a range.", {"lower_limit": I("Start (inclusive)."), "upper_limit": I("End (inclusive)."), "multiples": {"type": "array", "items": {"type": "integer"}, "description": "The numbers whose multiples to add."}}, ["lower_limit", "upper_limit", "multiples"])
pop = fn("math_toolkit.product_of_primes", "Product of the first n primes.", {"count": I("How many primes.")}, ["count"])
pmult = [(q("Find the sum of the multiples of 3 and 5 between 1 and 1000, and the product of the first five primes."), [som, pop],
          [{"math_toolkit.sum_of_multiples": {"lower_limit": [1], "upper_limit": [1000], "multiples": [[3, 5]]}}, {"math_toolkit.product_of_primes": {"count": [5]}}])]
bmi = fn("determine_body_mass_index", "Body mass index from weight and height.", {"weight": F("Weight in kg."), "height": F("Height in m.")}, ["weight", "height"])
irr = [(q("Calculate the area of a triangle with base 10 m and height 5 m."), [bmi], None), (q("Who wrote Pride and Prejudice?"), [bmi], None)]
user = fn("get_user_info", "Details of a user by id.", {"user_id": I("The user's id."), "special": {"type": "string", "description": "Special request.", "default": "none"}}, ["user_id"])
live_simple = [(q("Retrieve the details of user 7890, special request black."), [user], [{"get_user_info": {"user_id": [7890], "special": ["black"]}}])]
live_irr = [(q("Tell me a joke about databases."), [user], None)]

def write(cat, items, live=False):
    name = f"BFCL_v4_{cat}.json"
    with open(f"{D}/{name}", "w") as fq:
        ans = []
        for i, (question, funcs, gt) in enumerate(items):
            sid = f"{cat}_{i}-{i}-0" if live else f"{cat}_{i}"
            fq.write(json.dumps({"id": sid, "question": question, "function": funcs}) + "\n")
            if gt is not None: ans.append({"id": sid, "ground_truth": gt})
    if ans:
        with open(f"{D}/possible_answer/{name}", "w") as fa:
            for a in ans: fa.write(json.dumps(a) + "\n")
write("simple_python", simple); write("multiple", multiple); write("parallel", parallel); write("parallel_multiple", pmult)
write("irrelevance", irr); write("live_simple", live_simple, True); write("live_irrelevance", live_irr, True)

# scripted predictions (runner: replay) and the verdict BFCL's rules give each
def tc(name, **a): return {"name": name, "arguments": a}
P = [
 ("simple_python_0", [tc("calculate_triangle_area", base=10, height=5)], None, True, "optional parameter left out"),
 ("simple_python_1", [tc("math.gamma", number=5)], None, False, "simple_function_checker:wrong_func_name"),
 ("simple_python_2", [tc("geo.distance", origin="new york city ny", destination="Los Angeles,CA")], None, True, "string case and spacing standardized"),
 ("simple_python_3", [tc("physics.velocity", distance=100, time=20)], None, True, "int accepted for float"),
 ("simple_python_4", [tc("math.hypot", x=4)], None, False, "simple_function_checker:missing_required"),
 ("simple_python_5", [tc("weather.forecast", city="Paris", days=3, units="metric")], None, False, "simple_function_checker:unexpected_param"),
 ("simple_python_6", [tc("weather.forecast", city="Paris", days=5)], None, False, "value_error:others"),
 ("simple_python_7", [tc("stats.mean", numbers=[3.0, 2.5, 1.5])], None, False, "value_error:list/tuple"),
 ("simple_python_8", [tc("hotel.book", location="rome", room={"type": "Deluxe", "nights": 3})], None, True, "nested dict, optional key left out"),
 ("simple_python_9", [tc("weather.forecast", city="Paris")], None, False, "simple_function_checker:missing_optional"),
 ("simple_python_10", None, "[math.factorial(number=5)]", True, "Python-call text decoded"),
 ("simple_python_11", [tc("physics.velocity", distance="100", time=20)], None, False, "type_error:simple"),
 ("multiple_0", [tc("geometry.circle_area", radius=5)], None, True, "one call, right function"),
 ("multiple_1", [tc("triangle_properties.get", side1=3, side2=4, side3=5), tc("geometry.circle_area", radius=5)], None, False, "multiple_function_checker:wrong_count"),
 ("parallel_0", [tc("spotify.play", artist="Maroon 5", duration=15), tc("spotify.play", artist="Taylor Swift", duration=20)], None, True, "any order"),
 ("parallel_1", [tc("spotify.play", artist="Taylor Swift", duration=20)], None, False, "parallel_function_checker_no_order:wrong_count"),
 ("parallel_2", [tc("spotify.play", artist="Taylor Swift", duration=20), tc("spotify.play", artist="Maroon 5", duration=20)], None, False, "parallel_function_checker_no_order:cannot_find_match"),
 ("parallel_multiple_0", [tc("math_toolkit.product_of_primes", count=5), tc("math_toolkit.sum_of_multiples", lower_limit=1, upper_limit=1000, multiples=[3, 5])], None, True, "two functions, any order"),
 ("irrelevance_0", None, "None of the functions can compute a triangle's area.", True, "no call"),
 ("irrelevance_1", [tc("determine_body_mass_index", weight=70, height=1.8)], None, False, "irrelevance_error:decoder_success"),
 ("live_simple_0-0-0", [tc("get_user_info", user_id=7890, special="black")], None, True, "live category"),
 ("live_irrelevance_0-0-0", None, "[]", True, "empty call list is no call"),
]
with open(f"{D}/predictions.jsonl", "w") as f, open(f"{D}/expected.jsonl", "w") as e:
    for sid, calls, text, ok, why in P:
        line = {"sample_id": sid, "output": text}
        if calls is not None: line["tool_calls"] = calls
        f.write(json.dumps(line) + "\n")
        e.write(json.dumps({"sample_id": sid, "valid": ok, "rule": why}) + "\n")
print(len(P))
