"""tau2-bench's telecom domain: the agent's tools over the carrier's database (customers, lines, plans, bills,
devices), the user's tools over their own phone and surroundings (dual control), and the environment's sync between
the two, with the official names, arguments, answers and state changes (read from sierra-research/tau2-bench
`src/tau2/domains/telecom/`; written here).

Both databases are plain JSON data laid out as the official models dump them (every field present, in the models'
field order; dates and times as the official code prints them, `2025-01-15 10:30:00`), so answers and hashes are
the official ones. The official fixed points are kept: "today" is 2025-02-25. Functions that are not tools (the
tasks' initialization actions and assertions) are plain methods of the same names.

Official quirks kept: a charge with no draft bill creates one named `B` + 8 random hex digits (the official uuid4:
the database hash of such a conversation is not reproducible, and telecom tasks are not scored on it); `check_vpn_status`
shows the VPN details as a Python dict with the enum's repr. Not kept: the official `break_vpn` lowers the
performance of the toolkit's class-wide default VPN, so in the official process every later `connect_vpn` of any
task connects to a poor VPN; here each conversation starts from the default.
"""
from __future__ import annotations

import datetime
import uuid
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict

from evalpipe.benchmarks.tau2.toolkit import Toolkit, tool

TODAY = datetime.date(2025, 2, 25)
NETWORK_MODES = ("4g_5g_preferred", "4g_only", "3g_only", "2g_only")
DEFAULT_VPN = {"server_address": "192.168.1.1", "protocol": "OpenVPN", "server_performance": "excellent"}
SIGNAL_ICONS = {"none": "📵 No Signal", "poor": "📶¹ Poor", "fair": "📶² Fair", "good": "📶³ Good",
                "excellent": "📶⁴ Excellent"}
PERMISSIONS = ("sms", "storage", "phone", "network")


class APNSettings(BaseModel):
    """The APN settings as the official model reads them (`set_apn_settings`: unknown keys and bad values refused
    by the model)."""
    model_config = ConfigDict(extra="forbid")
    apn_name: Literal["internet", "broken"] = "internet"  # the official enum's values
    reset_at_reboot: bool = False
    mms_apn: Optional[str] = "mms"
    mmsc_url: Optional[str] = "http://mms.carrier.com/mms/wapenc"
    mms_proxy: Optional[str] = None
    mms_port: Optional[int] = None


def _apn(raw: dict[str, Any]) -> dict[str, Any]:
    return APNSettings(**raw).model_dump()


def _speed_text(value: float) -> str:
    return f"{value:.2f}"


class TelecomTools(Toolkit):
    """The agent's tools (named as the official class: a missing argument's error names it)."""

    domain = "telecom"

    # ---- lookups (official helpers) ----------------------------------------------------------------------------
    def _find(self, table: str, key: str, value: Any, label: str) -> dict[str, Any]:
        for row in self.db[table]:
            if row[key] == value:
                return row
        raise ValueError(f"{label} with ID {value} not found")

    def _get_line_by_id(self, line_id: str) -> dict[str, Any]:
        return self._find("lines", "line_id", line_id, "Line")

    def _get_line_by_phone(self, phone_number: str) -> dict[str, Any]:
        for line in self.db["lines"]:
            if line["phone_number"] == phone_number:
                return line
        raise ValueError(f"Line with phone number {phone_number} not found")

    def _get_plan_by_id(self, plan_id: str) -> dict[str, Any]:
        return self._find("plans", "plan_id", plan_id, "Plan")

    def _get_device_by_id(self, device_id: str) -> dict[str, Any]:
        return self._find("devices", "device_id", device_id, "Device")

    def _get_bill_by_id(self, bill_id: str) -> dict[str, Any]:
        return self._find("bills", "bill_id", bill_id, "Bill")

    def _get_target_line(self, customer_id: str, line_id: str) -> dict[str, Any]:
        customer = self.get_customer_by_id(customer_id)
        if line_id not in customer["line_ids"]:
            raise ValueError(f"Line {line_id} not found for customer {customer_id}")
        return self._get_line_by_id(line_id)

    def _get_bills_awaiting_payment(self, customer: dict[str, Any]) -> list[dict[str, Any]]:
        bills = [self._get_bill_by_id(b) for b in customer["bill_ids"]]
        return [b for b in bills if b and b["status"] == "Awaiting Payment"]

    def _set_bill_to_paid(self, bill_id: str) -> str:
        self._get_bill_by_id(bill_id)["status"] = "Paid"
        return f"Bill {bill_id} set to paid"

    def _apply_one_time_charge(self, customer_id: str, amount: float, description: str) -> None:
        customer = self.get_customer_by_id(customer_id)
        draft = None
        for bill_id in customer["bill_ids"]:
            bill = self._get_bill_by_id(bill_id)
            if bill and bill["status"] == "Draft":
                draft = bill
                break
        if not draft:
            start = (TODAY.replace(day=1) + datetime.timedelta(days=32)).replace(day=1)
            end = start.replace(month=start.month + 1 if start.month < 12 else 1,
                                year=start.year if start.month < 12 else start.year + 1) - datetime.timedelta(days=1)
            draft = {"bill_id": f"B{uuid.uuid4().hex[:8]}", "customer_id": customer_id, "period_start": str(start),
                     "period_end": str(end), "issue_date": str(start), "total_due": 0.0,
                     "due_date": str(start + datetime.timedelta(days=14)), "line_items": [], "status": "Draft"}
            self.db["bills"].append(draft)
            customer["bill_ids"].append(draft["bill_id"])
        draft["line_items"].append({"description": description, "amount": amount, "date": str(TODAY),
                                    "item_type": "Credit" if amount < 0 else "Charge"})
        draft["total_due"] += amount

    # ---- tools --------------------------------------------------------------------------------------------------
    @tool("read")
    def get_customer_by_phone(self, phone_number: str) -> dict[str, Any]:
        """Finds a customer by their primary contact or line phone number.

        Args:
            phone_number: The phone number to search for.
        """
        for customer in self.db["customers"]:
            if customer["phone_number"] == phone_number:
                return customer
            for line_id in customer["line_ids"]:
                line = self._get_line_by_id(line_id)
                if line and line["phone_number"] == phone_number:
                    return customer
        raise ValueError(f"Customer with phone number {phone_number} not found")

    @tool("read")
    def get_customer_by_id(self, customer_id: str) -> dict[str, Any]:
        """Retrieves a customer directly by their unique ID.

        Args:
            customer_id: The unique identifier of the customer.
        """
        for customer in self.db["customers"]:
            if customer["customer_id"] == customer_id:
                return customer
        raise ValueError(f"Customer with ID {customer_id} not found")

    @tool("read")
    def get_customer_by_name(self, full_name: str, dob: str) -> list[dict[str, Any]]:
        """Searches for customers by name and DOB. May return multiple matches if names are similar, DOB helps
        disambiguate.

        Args:
            full_name: The full name of the customer.
            dob: Date of birth for verification, in the format YYYY-MM-DD.
        """
        return [c for c in self.db["customers"]
                if c["full_name"].lower() == full_name.lower() and c["date_of_birth"] == dob]

    @tool("read")
    def get_details_by_id(self, id: str) -> dict[str, Any]:
        """Retrieves the details for a given ID. The ID must be a valid ID for a Customer, Line, Device, Bill, or
        Plan.

        Args:
            id: The ID of the object to retrieve.
        """
        if id.startswith("L"):
            return self._get_line_by_id(id)
        if id.startswith("D"):
            return self._get_device_by_id(id)
        if id.startswith("B"):
            return self._get_bill_by_id(id)
        if id.startswith("C"):
            return self.get_customer_by_id(id)
        if id.startswith("P"):
            return self._get_plan_by_id(id)
        raise ValueError(f"Unknown ID format or type: {id}")

    @tool("write")
    def suspend_line(self, customer_id: str, line_id: str, reason: str) -> dict[str, Any]:
        """Suspends a specific line (max 6 months). Checks: Line status must be Active. Logic: Sets line status to
        Suspended, records suspension_start_date.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to suspend.
            reason: Reason for suspension.
        """
        line = self._get_target_line(customer_id, line_id)
        if line["status"] != "Active":
            raise ValueError("Line must be active to suspend")
        line["status"], line["suspension_start_date"] = "Suspended", str(TODAY)
        return {"message": "Line suspended successfully. $5/month holding fee will apply.", "line": line}

    @tool("write")
    def resume_line(self, customer_id: str, line_id: str) -> dict[str, Any]:
        """Resumes a suspended line. Checks: Line status must be Suspended or Pending Activation. Logic: Sets line
        status to Active, clears suspension_start_date.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to resume.
        """
        line = self._get_target_line(customer_id, line_id)
        if line["status"] not in ("Suspended", "Pending Activation"):
            raise ValueError("Line must be suspended to resume")
        line["status"], line["suspension_start_date"] = "Active", None
        return {"message": "Line resumed successfully", "line": line}

    @tool("read")
    def get_bills_for_customer(self, customer_id: str, limit: int = 12) -> list[dict[str, Any]]:
        """Retrieves a list of the customer's bills, most recent first.

        Args:
            customer_id: ID of the customer.
            limit: Maximum number of bills to return.
        """
        customer = self.get_customer_by_id(customer_id)
        bills = [self._get_bill_by_id(b) for b in customer["bill_ids"]]
        return sorted(bills, key=lambda b: b["issue_date"], reverse=True)[:limit]

    @tool("write")
    def send_payment_request(self, customer_id: str, bill_id: str) -> str:
        """Sends a payment request to the customer for a specific bill. Checks: Customer exists; Bill exists and
        belongs to the customer; No other bills are already awaiting payment for this customer. Logic: Sets bill
        status to AWAITING_PAYMENT and notifies customer. Warning: This method does not check if the bill is already
        PAID. Always check the bill status before calling this method.

        Args:
            customer_id: ID of the customer who owns the bill.
            bill_id: ID of the bill to send payment request for.
        """
        customer = self.get_customer_by_id(customer_id)
        if self._get_bills_awaiting_payment(customer):
            raise ValueError("A bill is already awaiting payment for this customer")
        if bill_id not in customer["bill_ids"]:
            raise ValueError(f"Bill {bill_id} not found for customer {customer_id}")
        bill = self._get_bill_by_id(bill_id)
        bill["status"] = "Awaiting Payment"
        return f"Payment request sent to the customer for bill {bill['bill_id']}"

    @tool("read")
    def get_data_usage(self, customer_id: str, line_id: str) -> dict[str, Any]:
        """Retrieves current billing cycle data usage for a line, including data refueling amount, data limit, and
        cycle end date.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to check usage for.
        """
        line = self._get_target_line(customer_id, line_id)
        plan = self._get_plan_by_id(line["plan_id"])
        end = datetime.date(TODAY.year, TODAY.month + 1 if TODAY.month < 12 else 1, 1) - datetime.timedelta(days=1)
        # (numbers in a plain mapping are shown as strings, as the official answer's conversion shows them)
        return {"line_id": line_id, "data_used_gb": str(line["data_used_gb"]),
                "data_limit_gb": str(plan["data_limit_gb"]), "data_refueling_gb": str(line["data_refueling_gb"]),
                "cycle_end_date": end.isoformat()}

    @tool("write")
    def enable_roaming(self, customer_id: str, line_id: str) -> str:
        """Enables international roaming on a line.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to enable roaming for.
        """
        line = self._get_target_line(customer_id, line_id)
        if line["roaming_enabled"]:
            return "Roaming was already enabled"
        line["roaming_enabled"] = True
        return "Roaming enabled successfully"

    @tool("write")
    def disable_roaming(self, customer_id: str, line_id: str) -> str:
        """Disables international roaming on a line.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to disable roaming for.
        """
        line = self._get_target_line(customer_id, line_id)
        if not line["roaming_enabled"]:
            return "Roaming was already disabled"
        line["roaming_enabled"] = False
        return "Roaming disabled successfully"

    @tool("generic")
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the user's issue. Only transfer if the user
        explicitly asks for a human agent, or given the policy and the available tools, you cannot solve the user's
        issue.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"

    @tool("write")
    def refuel_data(self, customer_id: str, line_id: str, gb_amount: float) -> dict[str, Any]:
        """Refuels data for a specific line, adding to the customer's bill. Checks: Line status must be Active,
        Customer owns the line. Logic: Adds data to the line and charges customer based on the plan's refueling
        rate.

        Args:
            customer_id: ID of the customer who owns the line.
            line_id: ID of the line to refuel data for.
            gb_amount: Amount of data to add in gigabytes.
        """
        line = self._get_target_line(customer_id, line_id)
        if gb_amount <= 0:
            raise ValueError("Refuel amount must be positive")
        plan = self._get_plan_by_id(line["plan_id"])
        if not plan:
            raise ValueError("Plan not found for this line")
        charge = gb_amount * plan["data_refueling_price_per_gb"]
        line["data_refueling_gb"] += gb_amount
        self._apply_one_time_charge(customer_id, charge,
                                    f"Data refueling: {gb_amount} GB at ${plan['data_refueling_price_per_gb']}/GB")
        return {"message": f"Successfully added {gb_amount} GB of data for line {line_id} for ${charge:.2f}",
                "new_data_refueling_gb": str(line["data_refueling_gb"]), "charge": str(charge)}

    # ---- the tasks' initialization actions and assertions (not tools) -------------------------------------------
    def set_data_usage(self, customer_id: str, line_id: str, data_used_gb: float) -> str:
        self._get_target_line(customer_id, line_id)["data_used_gb"] = data_used_gb
        return f"Data usage set to {data_used_gb} GB for line {line_id}"

    def suspend_line_for_overdue_bill(self, customer_id: str, line_id: str, new_bill_id: str,
                                      contract_ended: bool) -> str:
        line = self._get_line_by_id(line_id)
        if line["status"] != "Active":
            raise ValueError("Line must be active to suspend for unpaid bill")
        amount = self._get_plan_by_id(line["plan_id"])["price_per_month"]
        if amount <= 0:
            raise ValueError("Amount must be positive for overdue bill")
        customer = self.get_customer_by_id(customer_id)
        if any(self._get_bill_by_id(b)["status"] == "Overdue" for b in customer["bill_ids"]):
            raise ValueError("Customer already has an overdue bill")
        last_day = TODAY.replace(day=1) - datetime.timedelta(days=1)
        first_day = last_day.replace(day=1)
        bill = {"bill_id": new_bill_id, "customer_id": customer_id, "period_start": str(first_day),
                "period_end": str(last_day), "issue_date": str(first_day), "total_due": 0.0,
                "due_date": str(first_day + datetime.timedelta(days=14)),
                "line_items": [{"description": f"Charge for line {line['line_id']}", "amount": amount,
                                "date": str(TODAY), "item_type": "Charge" if amount > 0 else "Credit"}],
                "status": "Overdue"}
        bill["total_due"] += amount
        self.db["bills"].append(bill)
        customer["bill_ids"].append(new_bill_id)
        line["status"], line["suspension_start_date"] = "Suspended", str(TODAY)
        if contract_ended:
            line["contract_end_date"] = str(last_day)
        return f"Line {line_id} suspended for unpaid bill {new_bill_id}. Contract ended: {contract_ended}"

    def assert_data_refueling_amount(self, customer_id: str, line_id: str, expected_amount: float) -> bool:
        return abs(self._get_target_line(customer_id, line_id)["data_refueling_gb"] - expected_amount) < 1e-6

    def assert_line_status(self, customer_id: str, line_id: str, expected_status: str) -> bool:
        return self._get_target_line(customer_id, line_id)["status"] == expected_status

    def assert_overdue_bill_exists(self, customer_id: str, overdue_bill_id: str) -> bool:
        customer = self.get_customer_by_id(customer_id)
        if overdue_bill_id not in customer["bill_ids"]:
            raise ValueError(f"Overdue bill {overdue_bill_id} not found")
        if self._get_bill_by_id(overdue_bill_id)["status"] != "Overdue":
            raise ValueError(f"Overdue bill {overdue_bill_id} is not overdue")
        return True

    def assert_no_overdue_bill(self, overdue_bill_id: str) -> bool:
        try:
            return self._get_bill_by_id(overdue_bill_id)["status"] == "Paid"
        except ValueError:
            return True


def _status_bar(d: dict[str, Any]) -> str:
    parts = []
    if d["airplane_mode"]:
        parts.append("✈️ Airplane Mode")
    else:
        parts.append(SIGNAL_ICONS.get(d["network_signal_strength"], "📵 No Signal"))
        if d["network_technology_connected"] != "none":
            parts.append(d["network_technology_connected"])
        if d["data_enabled"] and d["network_technology_connected"] != "none":
            parts.append("📱 Data Enabled")
            if d["data_saver_mode"]:
                parts.append("🔽 Data Saver")
        else:
            parts.append("📵 Data Disabled")
    if d["wifi_enabled"] and d["wifi_connected"]:
        parts.append(f"📡 Connected to {d['wifi_ssid']}" if d["wifi_ssid"] else "📡 Enabled")
    if d["vpn_connected"]:
        parts.append("🔒 VPN Connected")
    parts.append(f"🔋 {d['battery_level']}%")
    return " | ".join(parts)


class TelecomUserTools(Toolkit):
    """The user's tools on their own phone (`device`) and surroundings (`surroundings`)."""

    domain = "telecom"

    @property
    def device(self) -> dict[str, Any]:
        return self.db["device"]

    @property
    def surroundings(self) -> dict[str, Any]:
        return self.db["surroundings"]

    def _bar(self) -> str:
        return f"Status Bar: {_status_bar(self.device)}"

    def _sim_status(self) -> str:
        return "missing" if self.device["sim_card_missing"] else self.device["sim_card_status"]

    def _no_service(self) -> None:
        self.device.update(network_connection_status="no_service", network_technology_connected="none",
                           network_signal_strength="none")

    def simulate_network_search(self) -> None:
        """The outcome of a network search (official `simulate_network_search`)."""
        d, signals = self.device, self.surroundings["signal_strength"]
        if self._sim_status() == "active":
            d["network_connection_status"] = "connected"
            pref = d["network_mode_preference"]
            if pref == "4g_5g_preferred":
                five = signals.get("5G", "none")
                tech = "4G" if five == "none" else "5G"
            else:
                tech = {"4g_only": "4G", "3g_only": "3G", "2g_only": "2G"}.get(pref, "4G")
            d["network_technology_connected"], d["network_signal_strength"] = tech, signals.get(tech, "none")
        else:
            self._no_service()
        if d["airplane_mode"] or d["active_apn_settings"]["apn_name"] == "broken" \
                or not self.surroundings["line_active"]:
            self._no_service()

    def _mobile_data_working(self) -> bool:
        d, s = self.device, self.surroundings
        if d["airplane_mode"] or d["network_signal_strength"] == "none":
            return False
        if d["network_connection_status"] == "no_service":
            return False
        if s["is_abroad"] and (not d["roaming_enabled"] or not s["roaming_allowed"]):
            return False
        if not d["data_enabled"] or s["mobile_data_usage_exceeded"]:
            return False
        return True

    def _speed(self) -> tuple[Optional[float], Optional[str]]:
        if not self._mobile_data_working():
            return None, "No Connection"
        d = self.device
        factor = 0.1 if (d["vpn_connected"] and d["vpn_details"]
                         and d["vpn_details"]["server_performance"] == "poor") else 1.0
        if d["data_saver_mode"]:
            factor *= 0.2
        lo, hi = {"2G": (0.1, 0.4), "3G": (1.0, 5.0), "4G": (10.0, 100.0), "5G": (50.0, 500.0)}.get(
            d["network_technology_connected"], (0.0, 0.0))
        signal = {"poor": 0.2, "fair": 0.5, "good": 0.8, "excellent": 1.0}.get(d["network_signal_strength"], 0.0)
        speed = round((lo + hi) / 2.0 * signal * factor, 2)
        for limit, desc in ((1, "Very Poor"), (5, "Poor"), (25, "Fair"), (100, "Good")):
            if speed < limit:
                return speed, desc
        return speed, "Excellent"

    def _can_send_mms(self) -> bool:
        d = self.device
        if not self._mobile_data_working() or d["network_technology_connected"] == "2G":
            return False
        if d["wifi_calling_enabled"] and d["wifi_calling_mms_over_wifi"]:
            return False
        if d["active_apn_settings"]["mmsc_url"] is None:
            return False
        app = d["app_statuses"].get("messaging")
        return bool(app is not None and app["permissions"]["storage"] and app["permissions"]["sms"])

    def _toggle_airplane_mode(self) -> bool:
        d = self.device
        was_on = d["airplane_mode"]
        d["airplane_mode"] = not was_on
        if was_on:
            d["network_connection_status"] = "searching"
            if d["wifi_enabled"]:
                d.update(wifi_connected=False, wifi_ssid=None, wifi_signal_strength="none")
        else:
            d.update(wifi_connected=False, wifi_ssid=None, wifi_signal_strength="none")
            if d["vpn_connected"]:
                self._disconnect_vpn()
        self.simulate_network_search()
        return d["airplane_mode"]

    def _toggle(self, key: str, search: bool = True) -> bool:
        self.device[key] = not self.device[key]
        if search:
            self.simulate_network_search()
        return self.device[key]

    def _disconnect_vpn(self) -> bool:
        if not self.device["vpn_connected"]:
            return False
        self.device.update(vpn_connected=False, vpn_details=None)
        return True

    # ---- tools --------------------------------------------------------------------------------------------------
    @tool("read")
    def check_status_bar(self) -> str:
        """Shows what icons are currently visible in your phone's status bar (the area at the top of the screen).
        Displays network signal strength, mobile data status (enabled, disabled, data saver), Wi-Fi status, and
        battery level."""
        return self._bar()

    @tool("read")
    def check_network_status(self) -> str:
        """Checks your phone's connection status to cellular networks and Wi-Fi. Shows airplane mode status, signal
        strength, network type, whether mobile data is enabled, and whether data roaming is enabled."""
        d = self.device
        lines = [f"Airplane Mode: {'ON' if d['airplane_mode'] else 'OFF'}",
                 f"SIM Card Status: {self._sim_status()}",
                 f"Cellular Connection: {d['network_connection_status']}",
                 f"Cellular Signal: {d['network_signal_strength']}",
                 f"Cellular Network Type: {d['network_technology_connected']}",
                 f"Mobile Data Enabled: {'Yes' if d['data_enabled'] else 'No'}",
                 f"Data Roaming Enabled: {'Yes' if d['roaming_enabled'] else 'No'}",
                 f"Wi-Fi Radio: {'ON' if d['wifi_enabled'] else 'OFF'}",
                 f"Wi-Fi Connected: {'Yes' if d['wifi_connected'] else 'No'}"]
        if d["wifi_connected"]:
            lines.append(f"Connected Wi-Fi Network: {d['wifi_ssid']}")
        return "\n".join(lines)

    @tool("read")
    def check_network_mode_preference(self) -> str:
        """Shows the current network mode preference."""
        return f"Network Mode Preference: {self.device['network_mode_preference']}"

    @tool("write")
    def set_network_mode_preference(self, mode: str) -> str:
        """Changes the type of cellular network your phone prefers to connect to (e.g., 5G, LTE/4G, 3G).
        Higher-speed networks (LTE/5G) provide faster data but may use more battery.

        Args:
            mode: One of 4g_5g_preferred, 4g_only, 3g_only, 2g_only.
        """
        if not isinstance(mode, str) or mode not in NETWORK_MODES:
            return (f"Failed to set network mode: '{mode}' is not a valid option. Please use one of: "
                    f"{', '.join(NETWORK_MODES)}\n{self._bar()}")
        self.device["network_mode_preference"] = mode
        self.simulate_network_search()
        return f"Preferred Network Mode set to: {mode}\n{self._bar()}"

    @tool("read")
    def run_speed_test(self) -> str:
        """Measures your current internet connection speed (download speed). Provides information about connection
        quality and what activities it can support."""
        speed, desc = self._speed()
        if speed is None:
            return f"Speed test failed: {desc or 'Could not determine speed'}."
        advice = {"Very Poor": "Connection is very slow. Basic web browsing might be difficult.",
                  "Poor": "Connection is slow. Web browsing may be sluggish, streaming difficult.",
                  "Fair": "Connection is okay for web browsing and some standard definition streaming.",
                  "Good": "Connection is good for most activities, including HD streaming.",
                  "Excellent": "Connection is very fast."}.get(desc or "", "")
        return f"Speed Test Result: {_speed_text(speed)} Mbps ({desc}). {advice}"

    @tool("write")
    def toggle_airplane_mode(self) -> str:
        """Toggles Airplane Mode ON or OFF. When ON, it disconnects all wireless communications including cellular,
        Wi-Fi, and Bluetooth. Returns the new state of airplane_mode."""
        on = self._toggle_airplane_mode()
        return f"Airplane Mode is now {'ON' if on else 'OFF'}.\n{self._bar()}"

    @tool("read")
    def check_sim_status(self) -> str:
        """Checks if your SIM card is working correctly and displays its current status. Shows if the SIM is
        active, missing, or locked with a PIN or PUK code."""
        return {"active": "Your SIM card is active and working.", "missing": "No SIM card detected in the phone.",
                "locked_pin": "The SIM card is locked with a PIN code.",
                "locked_puk": "The SIM card is locked with a PUK code."}[self._sim_status()]

    @tool("write")
    def reseat_sim_card(self) -> str:
        """Simulates removing and reinserting your SIM card. This can help resolve recognition issues."""
        self.device["sim_card_missing"] = False
        self.simulate_network_search()
        return f"SIM card re-seated successfully.\n{self._bar()}"

    @tool("write")
    def toggle_data(self) -> str:
        """Toggles your phone's mobile data connection ON or OFF. Controls whether your phone can use cellular data
        for internet access when Wi-Fi is unavailable. Returns the new data connection status."""
        return f"Mobile Data is now {'ON' if self._toggle('data_enabled') else 'OFF'}.\n{self._bar()}"

    @tool("write")
    def toggle_roaming(self) -> str:
        """Toggles Data Roaming ON or OFF. When ON, your phone can use data networks in areas outside your carrier's
        coverage. Returns the new data roaming status."""
        return f"Data Roaming is now {'ON' if self._toggle('roaming_enabled') else 'OFF'}.\n{self._bar()}"

    @tool("read")
    def check_data_restriction_status(self) -> str:
        """Checks if your phone has any data-limiting features active. Shows if Data Saver mode is on."""
        return "Data Saver mode is ON (limits data usage)." if self.device["data_saver_mode"] \
            else "Data Saver mode is OFF."

    @tool("write")
    def toggle_data_saver_mode(self) -> str:
        """Toggles Data Saver mode ON or OFF. When ON, it reduces data usage, which may affect data speed. Returns
        the new data saver mode status."""
        on = self._toggle("data_saver_mode", search=False)
        return f"Data Saver Mode is now {'ON' if on else 'OFF'}.\n{self._bar()}"

    @tool("read")
    def check_apn_settings(self) -> str:
        """Checks the technical APN settings your phone uses to connect to your carrier's mobile data network.
        Shows current APN name and MMSC URL for picture messaging."""
        apn = self.device["active_apn_settings"]
        return (f"Current APN Name: {apn['apn_name'] or 'Not Set'}\nMMSC URL (for picture messages): "
                f"{apn['mmsc_url'] or 'Not Set'}\n(These are technical settings, usually best left unchanged.)")

    @tool("write")
    def set_apn_settings(self, apn_settings: dict) -> str:
        """Sets the APN settings for the phone.

        Args:
            apn_settings: The APN settings (apn_name, reset_at_reboot, mms_apn, mmsc_url, mms_proxy, mms_port).
        """
        if isinstance(apn_settings, dict):
            apn_settings = _apn(apn_settings)
        self.device["active_apn_settings"] = apn_settings
        self.simulate_network_search()
        return f"APN settings set to: {apn_settings['apn_name']}\n{self._bar()}"

    @tool("write")
    def reset_apn_settings(self) -> str:
        """Resets your APN settings to the default settings."""
        self.device["active_apn_settings"]["reset_at_reboot"] = True
        self.simulate_network_search()
        return f"APN settings will reset at reboot.\n{self._bar()}"

    @tool("read")
    def check_wifi_status(self) -> str:
        """Checks your Wi-Fi connection status. Shows if Wi-Fi is turned on, which network you're connected to (if
        any), and the signal strength."""
        d = self.device
        if not d["wifi_enabled"]:
            return "Wi-Fi is turned OFF."
        if d["wifi_connected"]:
            return f"Wi-Fi is ON and connected to '{d['wifi_ssid']}'. Signal strength: {d['wifi_signal_strength']}."
        return "Wi-Fi is ON but not connected to any network."

    @tool("write")
    def toggle_wifi(self) -> str:
        """Toggles your phone's Wi-Fi radio ON or OFF. Controls whether your phone can discover and connect to
        wireless networks for internet access. Returns the new Wi-Fi status."""
        d = self.device
        if d["airplane_mode"]:
            return f"Cannot change Wi-Fi settings while Airplane Mode is ON.\n{self._bar()}"
        d["wifi_enabled"] = not d["wifi_enabled"]
        if not d["wifi_enabled"]:
            d.update(wifi_connected=False, wifi_ssid=None, wifi_signal_strength="none")
        return f"Wi-Fi is now {'ON' if d['wifi_enabled'] else 'OFF'}.\n{self._bar()}"

    @tool("read")
    def check_wifi_calling_status(self) -> str:
        """Checks if Wi-Fi Calling is enabled on your device. This feature allows you to make and receive calls
        over a Wi-Fi network instead of using the cellular network."""
        return f"Wi-Fi Calling is currently turned {'ON' if self.device['wifi_calling_enabled'] else 'OFF'}."

    @tool("write")
    def toggle_wifi_calling(self) -> str:
        """Toggles Wi-Fi Calling ON or OFF. This feature allows you to make and receive calls over Wi-Fi instead of
        the cellular network, which can help in areas with weak cellular signal. Returns the new Wi-Fi Calling
        status."""
        on = self._toggle("wifi_calling_enabled", search=False)
        return f"Wi-Fi Calling is now {'ON' if on else 'OFF'}.\n{self._bar()}"

    @tool("read")
    def check_vpn_status(self) -> str:
        """Checks if you're using a VPN (Virtual Private Network) connection. Shows if a VPN is active, connected,
        and displays any available connection details."""
        d = self.device
        if d["vpn_connected"]:
            v = d["vpn_details"]
            if v:  # (the official text shows the details' dict, the performance as its enum's repr)
                perf = v["server_performance"]
                return (f"VPN is ON and connected. Details: {{'server_address': {v['server_address']!r}, "
                        f"'protocol': {v['protocol']!r}, 'server_performance': "
                        f"<PerformanceLevel.{perf.upper()}: {perf!r}>}}")
            return "VPN is ON and connected (no specific details available)."
        if d["vpn_enabled_setting"]:
            return "VPN is turned ON in settings, but currently not connected."
        return "VPN is turned OFF."

    @tool("write")
    def connect_vpn(self) -> str:
        """Connects to your VPN (Virtual Private Network)."""
        if self.device["vpn_connected"]:
            return "VPN already connected."
        self.device.update(vpn_connected=True, vpn_details=dict(DEFAULT_VPN))
        return f"VPN connected successfully.\n{self._bar()}"

    @tool("write")
    def disconnect_vpn(self) -> str:
        """Disconnects any active VPN (Virtual Private Network) connection. Stops routing your internet traffic
        through a VPN server, which might affect connection speed or access to content."""
        done = self._disconnect_vpn()
        return f"{'VPN disconnected successfully.' if done else 'No active VPN connection to disconnect.'}\n{self._bar()}"

    @tool("read")
    def check_installed_apps(self) -> str:
        """Returns the name of all installed apps on the phone."""
        return f"The following apps are installed on the phone: {', '.join(self.device['app_statuses'])}"

    def _granted(self, app: dict[str, Any]) -> list[str]:
        return [p.replace("_", " ").lower() for p, ok in app["permissions"].items() if ok]

    @tool("read")
    def check_app_status(self, app_name: str) -> str:
        """Checks detailed information about a specific app. Shows its permissions and background data usage
        settings.

        Args:
            app_name: The name of the app.
        """
        app = self.device["app_statuses"].get(app_name)
        if app is None:
            return f"App '{app_name}' not found on this phone."
        lines = [f"Status for App: {app_name}"]
        granted = self._granted(app)
        if not granted:
            lines.append(" - Permissions: None granted.")
        else:
            lines.append(" - Permissions Granted:")
            lines.extend(f"   - {p}" for p in granted)
        return "\n".join(lines)

    @tool("read")
    def check_app_permissions(self, app_name: str) -> str:
        """Checks what permissions a specific app currently has. Shows if the app has access to features like
        storage, camera, location, etc.

        Args:
            app_name: The name of the app.
        """
        app = self.device["app_statuses"].get(app_name)
        if app is None:
            return f"App '{app_name}' not found on this phone."
        granted = self._granted(app)
        if not granted:
            return f"App '{app_name}' currently has no permissions granted."
        return f"App '{app_name}' has permission for: {', '.join(granted)}."

    @tool("write")
    def grant_app_permission(self, app_name: str, permission: str) -> str:
        """Gives a specific permission to an app (like access to storage, camera, or location). Required for some
        app functions to work properly.

        Args:
            app_name: The name of the app to grant the permission to.
            permission: The permission to grant, should be lowercase.
        """
        app = self.device["app_statuses"].get(app_name)
        permission = permission.lower()
        if not app:
            ok, msg = False, f"App '{app_name}' not found. Cannot grant permission."
        elif permission not in app["permissions"]:
            ok, msg = False, (f"Permission '{permission}' not tracked for app '{app_name}', available permissions: "
                              f"{list(app['permissions'])}")
        else:
            app["permissions"][permission] = True
            ok, msg = True, f"Permission '{permission}' granted to app '{app_name}'."
        return f"{'Success. ' if ok else 'Error. '}{msg}\n{self._bar()}"

    @tool("read")
    def can_send_mms(self) -> str:
        """Checks if the default messaging app can send MMS messages."""
        return "Your messaging app can send MMS messages." if self._can_send_mms() \
            else "Your messaging app cannot send MMS messages."

    @tool("write")
    def reboot_device(self) -> str:
        """Restarts your phone completely. This can help resolve many temporary software glitches by refreshing all
        running services and connections."""
        lines = []
        if self.device["active_apn_settings"]["reset_at_reboot"]:
            lines.append("Resetting APN settings...")
            self.device["active_apn_settings"] = APNSettings().model_dump()
        lines.append("Restarting network services...")
        self.device["network_connection_status"] = "searching"
        self.simulate_network_search()
        return "\n".join(lines) + f"\n{self._bar()}"

    @tool("read")
    def check_payment_request(self) -> str:
        """Checks if the agent has sent you a payment request."""
        req = self.surroundings["payment_request"]
        if req is None:
            return "No payment request has been made."
        return f"You have a payment request for bill {req['bill_id']} of {req['amount_due']} USD."

    @tool("write")
    def make_payment(self) -> str:
        """Makes a payment for the bill that the agent has sent you."""
        req = self.surroundings["payment_request"]
        if req is None:
            return "You do not have a payment request."
        req["paid"] = True
        return f"Payment of {req['amount_due']} USD has been made for bill {req['bill_id']}."

    # ---- the tasks' initialization actions and assertions (not tools) -------------------------------------------
    def set_user_info(self, name: str, phone_number: str) -> None:
        self.surroundings.update(name=name, phone_number=phone_number)

    def set_user_location(self, abroad: bool) -> None:
        self.surroundings["is_abroad"] = abroad

    def turn_airplane_mode_on(self) -> str:
        if not self._toggle_airplane_mode():
            self._toggle_airplane_mode()
        return "Airplane Mode is now ON."

    def turn_airplane_mode_off(self) -> str:
        if self._toggle_airplane_mode():
            self._toggle_airplane_mode()
        return "Airplane Mode is now OFF."

    def unseat_sim_card(self) -> str:
        self.device["sim_card_missing"] = True
        self.simulate_network_search()
        return "SIM card un-seated successfully."

    def lock_sim_card(self, mode: str) -> str:
        if mode == "pin":
            self.device["sim_card_status"] = "locked_pin"
        elif mode == "puk":
            self.device["sim_card_status"] = "locked_puk"
        self.simulate_network_search()
        return f"SIM card locked successfully in {mode} mode."

    def turn_data_on(self) -> str:
        self.device["data_enabled"] = True  # (the official one runs no network search)
        return "Data connection restored."

    def turn_data_off(self) -> str:
        if self._toggle("data_enabled"):
            self._toggle("data_enabled")
        return "Data connection broken."

    def turn_roaming_on(self) -> str:
        if not self._toggle("roaming_enabled"):
            self._toggle("roaming_enabled")
        return "Data Roaming is now ON."

    def turn_roaming_off(self) -> str:
        if self._toggle("roaming_enabled"):
            self._toggle("roaming_enabled")
        return "Data Roaming is now OFF."

    def turn_data_saver_mode_on(self) -> str:
        if not self._toggle("data_saver_mode", search=False):
            self._toggle("data_saver_mode", search=False)
        return "Data Saver Mode is now ON."

    def turn_data_saver_mode_off(self) -> str:
        if self._toggle("data_saver_mode", search=False):
            self._toggle("data_saver_mode", search=False)
        return "Data Saver Mode is now OFF."

    def break_apn_settings(self) -> str:
        self.device["active_apn_settings"]["apn_name"] = "broken"
        self.simulate_network_search()
        return "APN settings broken. Please call reset_apn_settings() to fix."

    def break_apn_mms_setting(self) -> str:
        self.device["active_apn_settings"]["mmsc_url"] = None
        return "APN MMS setting broken. Please call reset_apn_settings() to fix."

    def set_wifi_calling(self, enabled: bool, mms_over_wifi: Optional[bool] = None) -> str:
        if self.device["wifi_calling_enabled"] != enabled:
            self._toggle("wifi_calling_enabled", search=False)
        msg = f"Wi-Fi Calling is now {'ON' if enabled else 'OFF'}."
        if mms_over_wifi is not None:
            self.device["wifi_calling_mms_over_wifi"] = mms_over_wifi
            msg += f"\nMMS over Wi-Fi is now {'ON' if mms_over_wifi else 'OFF'}."
        return msg

    def break_vpn(self) -> str:
        self.connect_vpn()
        self.device["vpn_details"]["server_performance"] = "poor"
        return "VPN connection broken."

    def remove_app_permission(self, app_name: str, permission: str) -> tuple[bool, str]:
        app = self.device["app_statuses"].get(app_name)
        permission = permission.lower()
        if not app:
            return False, f"App '{app_name}' not found. Cannot remove permission."
        if permission not in app["permissions"]:
            return False, f"Permission '{permission}' not tracked for app '{app_name}'."
        app["permissions"][permission] = False
        return True, f"Permission '{permission}' removed from app '{app_name}'."

    def assert_airplane_mode_status(self, expected_status: bool) -> bool:
        return self.device["airplane_mode"] == expected_status

    def assert_service_status(self, expected_status: str) -> bool:
        if expected_status not in ("connected", "searching", "no_service", "emergency_only"):
            raise ValueError(f"'{expected_status}' is not a valid NetworkStatus")
        return self.device["network_connection_status"] == expected_status

    def assert_mobile_data_status(self, expected_status: bool) -> bool:
        return self._mobile_data_working() == expected_status

    def assert_mobile_roaming_status(self, expected_status: bool) -> bool:
        return self.device["roaming_enabled"] == expected_status

    def assert_mobile_data_saver_mode_status(self, expected_status: bool) -> bool:
        return self.device["data_saver_mode"] == expected_status

    def assert_internet_speed(self, expected_speed: float, expected_desc: Optional[str] = None) -> bool:
        speed, desc = self._speed()
        speed = speed or 0.0
        if expected_desc is None:
            return speed >= expected_speed
        return speed >= expected_speed and desc.lower() == expected_desc.lower()

    def assert_internet_not_excellent(self) -> bool:
        return self._speed()[1].lower() != "excellent"

    def assert_can_send_mms(self, expected_status: bool) -> bool:
        return self._can_send_mms() == expected_status

    def assert_mobile_data_usage_exceeded(self, expected_status: bool) -> bool:
        return self.surroundings["mobile_data_usage_exceeded"] == expected_status


def sync(agent: TelecomTools, user: TelecomUserTools) -> None:
    """The official environment's sync of the user's surroundings with the carrier's records (run after every
    successful tool call, initialization action and assertion, and at the end of setting a state)."""
    s = user.surroundings
    if s["phone_number"] is None:
        return
    line = agent._get_line_by_phone(s["phone_number"])
    s["line_active"] = line["status"] == "Active"
    s["roaming_allowed"] = bool(line["roaming_enabled"])
    plan = agent._get_plan_by_id(line["plan_id"])
    s["mobile_data_usage_exceeded"] = line["data_used_gb"] >= plan["data_limit_gb"] + line["data_refueling_gb"]
    req = s["payment_request"]
    if req is not None and req["paid"]:
        agent._set_bill_to_paid(req["bill_id"])
        s["payment_request"] = None
    if s["payment_request"] is None:
        bills = agent._get_bills_awaiting_payment(agent.get_customer_by_phone(s["phone_number"]))
        if bills:
            s["payment_request"] = {"bill_id": bills[0]["bill_id"], "amount_due": bills[0]["total_due"],
                                    "paid": False}

