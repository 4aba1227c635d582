"""tau2-bench's airline domain: flights (a status and seats/prices per date), users (payment methods, saved
passengers) and reservations, with the official tools' names, arguments, refusals and state changes (read from
sierra-research/tau2-bench `src/tau2/domains/airline/`; written here).

The database is plain JSON data, laid out as the official FlightDB dumps it (every field present, `status: null` on
a reservation that is not cancelled, payment-method and certificate amounts as numbers with a fraction). Arguments
that the official code reads through its data models are read through models of the same field types here
(pydantic, lax mode): extra keys are dropped, `100.0` is accepted where a whole number of dollars is meant, and a
missing field is refused. The official quirks are kept because the official evaluator's expected database has them:
"now" is 2024-05-15T15:00:00; new reservations are HATHAT, HATHAU, HATHAV; new certificates certificate_3221322 and
the two after; cancelling appends negative payments but frees no seat; changing flights moves no seat.
"""
from __future__ import annotations

import copy
from typing import Any, Literal, Optional

from pydantic import BaseModel, TypeAdapter

from evalpipe.benchmarks.tau2.toolkit import Calculator, Toolkit, tool

NOW = "2024-05-15T15:00:00"
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
NEW_CERTIFICATE_NUMBERS = (3221322, 3221323, 3221324)
AIRPORTS = (("SFO", "San Francisco"), ("JFK", "New York"), ("LAX", "Los Angeles"), ("ORD", "Chicago"),
            ("DFW", "Dallas"), ("DEN", "Denver"), ("SEA", "Seattle"), ("ATL", "Atlanta"), ("MIA", "Miami"),
            ("BOS", "Boston"), ("PHX", "Phoenix"), ("IAH", "Houston"), ("LAS", "Las Vegas"), ("MCO", "Orlando"),
            ("EWR", "Newark"), ("CLT", "Charlotte"), ("MSP", "Minneapolis"), ("DTW", "Detroit"),
            ("PHL", "Philadelphia"), ("LGA", "LaGuardia"))


# The argument shapes, with the official models' field types (extra keys ignored, as pydantic does by default).
class FlightInfo(BaseModel):
    flight_number: str
    date: str


class Passenger(BaseModel):
    first_name: str
    last_name: str
    dob: str


class Payment(BaseModel):
    payment_id: str
    amount: int


class Reservation(BaseModel):
    """The fields of a new reservation that the official model checks when it is built (named as the official
    model, whose name its refusals show)."""
    user_id: str
    origin: str
    destination: str
    flight_type: Literal["round_trip", "one_way"]
    cabin: Literal["business", "economy", "basic_economy"]
    total_baggages: int
    nonfree_baggages: int
    insurance: Literal["yes", "no"]


_FLOAT = TypeAdapter(float)


def _models(items: list[Any], model: type[BaseModel]) -> list[dict[str, Any]]:
    """A list of argument objects as the official code reads it: converted to the model when every entry is a
    mapping (then dumped back to plain data)."""
    if all(isinstance(i, dict) for i in items):
        return [model(**i).model_dump() for i in items]
    return [i.model_dump() if isinstance(i, BaseModel) else i for i in items]


class AirlineTools(Calculator, Toolkit):
    domain = "airline"

    # ---- lookups ------------------------------------------------------------------------------------------------
    def _user(self, user_id: str) -> dict[str, Any]:
        if user_id not in self.db["users"]:
            raise ValueError(f"User {user_id} not found")
        return self.db["users"][user_id]

    def _reservation(self, reservation_id: str) -> dict[str, Any]:
        if reservation_id not in self.db["reservations"]:
            raise ValueError(f"Reservation {reservation_id} not found")
        return self.db["reservations"][reservation_id]

    def _flight(self, flight_number: str) -> dict[str, Any]:
        if flight_number not in self.db["flights"]:
            raise ValueError(f"Flight {flight_number} not found")
        return self.db["flights"][flight_number]

    def _flight_date(self, flight_number: str, date: str) -> dict[str, Any]:
        flight = self._flight(flight_number)
        if date not in flight["dates"]:
            raise ValueError(f"Flight {flight_number} not found on date {date}")
        return flight["dates"][date]

    def _direct(self, date: str, origin: Optional[str] = None, destination: Optional[str] = None,
                leave_after: Optional[str] = None) -> list[dict[str, Any]]:
        out = []
        for f in self.db["flights"].values():
            day = f["dates"].get(date)
            if ((origin is None or f["origin"] == origin) and (destination is None or f["destination"] == destination)
                    and day is not None and day["status"] == "available"
                    and (leave_after is None or f["scheduled_departure_time_est"] >= leave_after)):
                out.append({"flight_number": f["flight_number"], "origin": f["origin"],
                            "destination": f["destination"], "status": "available",
                            "scheduled_departure_time_est": f["scheduled_departure_time_est"],
                            "scheduled_arrival_time_est": f["scheduled_arrival_time_est"], "date": None,
                            "available_seats": copy.deepcopy(day["available_seats"]),
                            "prices": copy.deepcopy(day["prices"])})
        return out

    def _charge_for_update(self, user: dict[str, Any], payment_id: str, total: int) -> Optional[dict[str, Any]]:
        """The payment of a change (baggage, flights): certificates refused, a gift card must cover it and is
        debited; no payment entry when the total is 0."""
        if payment_id not in user["payment_methods"]:
            raise ValueError("Payment method not found")
        method = user["payment_methods"][payment_id]
        if method["source"] == "certificate":
            raise ValueError("Certificate cannot be used to update reservation")
        if method["source"] == "gift_card" and method["amount"] < total:
            raise ValueError("Gift card balance is not enough")
        if method["source"] == "gift_card":
            method["amount"] -= total
        return Payment(payment_id=payment_id, amount=total).model_dump() if total != 0 else None

    # ---- tools --------------------------------------------------------------------------------------------------
    @tool("write")
    def book_reservation(self, user_id: str, origin: str, destination: str, flight_type: str, cabin: str,
                         flights: list[dict], passengers: list[dict], payment_methods: list[dict],
                         total_baggages: int, nonfree_baggages: int, insurance: str) -> dict[str, Any]:
        """Book a new reservation for a user and charge it to the given payment methods.

        Args:
            user_id: The user's id, e.g. 'sara_doe_496'.
            origin: IATA code of the trip's origin, e.g. 'SFO'.
            destination: IATA code of the trip's destination, e.g. 'JFK'.
            flight_type: 'one_way' or 'round_trip'.
            cabin: 'basic_economy', 'economy' or 'business'.
            flights: Each flight segment, as {"flight_number": "HAT001", "date": "2024-05-01"}.
            passengers: Each passenger, as {"first_name": ..., "last_name": ..., "dob": "YYYY-MM-DD"}.
            payment_methods: Each payment, as {"payment_id": ..., "amount": whole dollars}.
            total_baggages: Total number of checked bags.
            nonfree_baggages: Number of checked bags that are paid for.
            insurance: 'yes' or 'no'.
        """
        flights = _models(flights, FlightInfo)
        passengers = _models(passengers, Passenger)
        payment_methods = _models(payment_methods, Payment)
        user = self._user(user_id)
        reservation_id = next((r for r in NEW_RESERVATION_IDS if r not in self.db["reservations"]), None)
        if reservation_id is None:
            raise ValueError("Too many reservations")
        fields = Reservation(user_id=user_id, origin=origin, destination=destination, flight_type=flight_type,
                                    cabin=cabin, total_baggages=total_baggages, nonfree_baggages=nonfree_baggages,
                                    insurance=insurance)
        reservation = {"reservation_id": reservation_id, "user_id": user_id, "origin": origin,
                       "destination": destination, "flight_type": fields.flight_type, "cabin": fields.cabin,
                       "flights": [], "passengers": copy.deepcopy(passengers),
                       "payment_history": copy.deepcopy(payment_methods), "created_at": NOW,
                       "total_baggages": fields.total_baggages, "nonfree_baggages": fields.nonfree_baggages,
                       "insurance": fields.insurance, "status": None}
        total = 0
        days = []
        for info in flights:
            number = info["flight_number"]
            flight = self._flight(number)
            day = self._flight_date(number, info["date"])
            if day["status"] != "available":
                raise ValueError(f"Flight {number} not available on date {info['date']}")
            if day["available_seats"][cabin] < len(passengers):
                raise ValueError(f"Not enough seats on flight {number}")
            price = day["prices"][cabin]
            reservation["flights"].append({"flight_number": number, "origin": flight["origin"],
                                           "destination": flight["destination"], "date": info["date"],
                                           "price": price})
            days.append(day)
            total += price * len(passengers)
        if insurance == "yes":
            total += 30 * len(passengers)
        total += 50 * nonfree_baggages
        for pay in payment_methods:
            pid = pay["payment_id"]
            if pid not in user["payment_methods"]:
                raise ValueError(f"Payment method {pid} not found")
            method = user["payment_methods"][pid]
            if method["source"] in ("gift_card", "certificate") and method["amount"] < pay["amount"]:
                raise ValueError(f"Not enough balance in payment method {pid}")
        paid = sum(p["amount"] for p in payment_methods)
        if paid != total:
            raise ValueError(f"Payment amount does not add up, total price is {total}, but paid {paid}")
        for pay in payment_methods:
            method = user["payment_methods"][pay["payment_id"]]
            if method["source"] == "gift_card":
                method["amount"] -= pay["amount"]
            elif method["source"] == "certificate":
                user["payment_methods"].pop(pay["payment_id"])
        for day in days:
            day["available_seats"][cabin] -= len(passengers)
        self.db["reservations"][reservation_id] = reservation
        user["reservations"].append(reservation_id)
        return reservation

    @tool("write")
    def cancel_reservation(self, reservation_id: str) -> dict[str, Any]:
        """Cancel a whole reservation; every payment is refunded (a negative payment per payment).

        Args:
            reservation_id: The reservation id, e.g. 'ZFA04Y'.
        """
        reservation = self._reservation(reservation_id)
        refunds = [Payment(payment_id=p["payment_id"], amount=-p["amount"]).model_dump()
                   for p in reservation["payment_history"]]
        reservation["payment_history"].extend(refunds)
        reservation["status"] = "cancelled"
        return reservation  # (the official code frees no seat here)

    @tool("read")
    def get_reservation_details(self, reservation_id: str) -> dict[str, Any]:
        """A reservation's details.

        Args:
            reservation_id: The reservation id, e.g. '8JX2WO'.
        """
        return self._reservation(reservation_id)

    @tool("read")
    def get_user_details(self, user_id: str) -> dict[str, Any]:
        """A user's profile: payment methods, saved passengers, membership and reservation ids.

        Args:
            user_id: The user's id, e.g. 'sara_doe_496'.
        """
        return self._user(user_id)

    @tool("read")
    def list_all_airports(self) -> list[dict[str, str]]:
        """Every airport served, as IATA code and city."""
        return [{"iata": code, "city": city} for code, city in AIRPORTS]

    @tool("read")
    def search_direct_flight(self, origin: str, destination: str, date: str) -> list[dict[str, Any]]:
        """Direct flights with seats for sale between two airports on a date.

        Args:
            origin: IATA code of the origin, e.g. 'JFK'.
            destination: IATA code of the destination, e.g. 'LAX'.
            date: The date, 'YYYY-MM-DD', e.g. '2024-01-01'.
        """
        return self._direct(date=date, origin=origin, destination=destination)

    @tool("read")
    def search_onestop_flight(self, origin: str, destination: str, date: str) -> list[list[dict[str, Any]]]:
        """Pairs of connecting flights (one stop) with seats for sale between two airports, leaving on a date.

        Args:
            origin: IATA code of the origin, e.g. 'JFK'.
            destination: IATA code of the destination, e.g. 'LAX'.
            date: The date of the first flight, 'YYYY-MM-DD', e.g. '2024-05-01'.
        """
        out = []
        for first in self._direct(date=date, origin=origin):
            first["date"] = date
            # (as the official code: the next day is written as May's day + 1)
            date2 = f"2024-05-{int(date[-2:]) + 1}" if "+1" in first["scheduled_arrival_time_est"] else date
            for second in self._direct(date=date2, origin=first["destination"], destination=destination,
                                       leave_after=first["scheduled_arrival_time_est"]):
                second["date"] = date2
                out.append([first, second])
        return out

    @tool("write")
    def send_certificate(self, user_id: str, amount: int) -> str:
        """Give a user a travel certificate of an amount (check the policy first).

        Args:
            user_id: The user's id, e.g. 'sara_doe_496'.
            amount: The certificate's amount in dollars.
        """
        user = self._user(user_id)
        for number in NEW_CERTIFICATE_NUMBERS:
            pid = f"certificate_{number}"
            if pid not in user["payment_methods"]:
                user["payment_methods"][pid] = {"source": "certificate", "id": pid, "amount": _FLOAT.validate_python(amount)}
                return f"Certificate {pid} added to user {user_id} with amount {amount}."
        raise ValueError("Too many certificates")

    @tool("generic")
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the user over to a human agent with a summary; only when the user asks for one, or when the policy
        and the tools leave the request unsolvable.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"

    @tool("write")
    def update_reservation_baggages(self, reservation_id: str, total_baggages: int, nonfree_baggages: int,
                                    payment_id: str) -> dict[str, Any]:
        """Change a reservation's checked bags; added paid bags are charged to a payment method of the profile.

        Args:
            reservation_id: The reservation id, e.g. 'ZFA04Y'.
            total_baggages: The new total number of checked bags.
            nonfree_baggages: The new number of paid checked bags.
            payment_id: A payment method id of the user's profile, e.g. 'credit_card_7815826' or 'gift_card_7815826'.
        """
        reservation = self._reservation(reservation_id)
        user = self._user(reservation["user_id"])
        total = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
        payment = self._charge_for_update(user, payment_id, total)
        if payment is not None:
            reservation["payment_history"].append(payment)
        reservation["total_baggages"] = total_baggages
        reservation["nonfree_baggages"] = nonfree_baggages
        return reservation

    @tool("write")
    def update_reservation_flights(self, reservation_id: str, cabin: str, flights: list[dict],
                                   payment_id: str) -> dict[str, Any]:
        """Change a reservation's flights and/or cabin; the price difference is charged to (or refunded on) a
        payment method of the profile.

        Args:
            reservation_id: The reservation id, e.g. 'ZFA04Y'.
            cabin: The reservation's cabin after the change: 'basic_economy', 'economy' or 'business'.
            flights: EVERY flight segment of the changed reservation (unchanged ones too), as {"flight_number": ..., "date": "YYYY-MM-DD"}.
            payment_id: A payment method id of the user's profile, e.g. 'credit_card_7815826' or 'gift_card_7815826'.
        """
        flights = _models(flights, FlightInfo)
        reservation = self._reservation(reservation_id)
        user = self._user(reservation["user_id"])
        n = len(reservation["passengers"])
        total = 0
        new_flights = []
        for info in flights:
            kept = next((f for f in reservation["flights"] if f["flight_number"] == info["flight_number"]
                         and f["date"] == info["date"] and cabin == reservation["cabin"]), None)
            if kept is not None:
                total += kept["price"] * n
                new_flights.append(kept)
                continue
            flight = self._flight(info["flight_number"])
            day = self._flight_date(info["flight_number"], info["date"])
            if day["status"] != "available":
                raise ValueError(f"Flight {info['flight_number']} not available on date {info['date']}")
            if day["available_seats"][cabin] < n:
                raise ValueError(f"Not enough seats on flight {info['flight_number']}")
            entry = {"flight_number": info["flight_number"], "origin": flight["origin"],
                     "destination": flight["destination"], "date": info["date"], "price": day["prices"][cabin]}
            total += entry["price"] * n
            new_flights.append(entry)
        total -= sum(f["price"] for f in reservation["flights"]) * n
        payment = self._charge_for_update(user, payment_id, total)
        if payment is not None:
            reservation["payment_history"].append(payment)
        reservation["flights"] = new_flights
        reservation["cabin"] = cabin
        return reservation  # (seats are not moved, as in the official code)

    @tool("write")
    def update_reservation_passengers(self, reservation_id: str, passengers: list[dict]) -> dict[str, Any]:
        """Replace a reservation's passengers (the number of passengers cannot change).

        Args:
            reservation_id: The reservation id, e.g. 'ZFA04Y'.
            passengers: Each passenger, as {"first_name": ..., "last_name": ..., "dob": "YYYY-MM-DD"}.
        """
        passengers = _models(passengers, Passenger)
        reservation = self._reservation(reservation_id)
        if len(passengers) != len(reservation["passengers"]):
            raise ValueError("Number of passengers does not match")
        reservation["passengers"] = copy.deepcopy(passengers)
        return reservation

    @tool("read")
    def get_flight_status(self, flight_number: str, date: str) -> str:
        """A flight's status on a date ('available', 'on time', 'delayed', 'flying', 'landed', 'cancelled').

        Args:
            flight_number: The flight number, e.g. 'HAT001'.
            date: The date, 'YYYY-MM-DD'.
        """
        return self._flight_date(flight_number, date)["status"]
