"""tau2-bench's retail domain: users, orders and products, with the official tools' names, arguments, refusals and
state changes (read from sierra-research/tau2-bench `src/tau2/domains/retail/tools.py`; written here)."""
from __future__ import annotations

import json
from typing import Any

from evalpipe.benchmarks.tau2.toolkit import Calculator, Toolkit, tool


def _is_gift_card(method: dict[str, Any]) -> bool:
    return method.get("source") == "gift_card"


def _address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict[str, Any]:
    return {"address1": address1, "address2": address2, "city": city, "country": country, "state": state, "zip": zip}


class RetailTools(Calculator, Toolkit):
    domain = "retail"

    # ---- lookups (refusals as the official ones word them) -------------------------------------------------------
    def _order(self, order_id: str) -> dict[str, Any]:
        if order_id not in self.db["orders"]:
            raise ValueError("Order not found")
        return self.db["orders"][order_id]

    def _user(self, user_id: str) -> dict[str, Any]:
        if user_id not in self.db["users"]:
            raise ValueError("User not found")
        return self.db["users"][user_id]

    def _product(self, product_id: str) -> dict[str, Any]:
        if product_id not in self.db["products"]:
            raise ValueError("Product not found")
        return self.db["products"][product_id]

    def _variant(self, product_id: str, variant_id: str) -> dict[str, Any]:
        product = self._product(product_id)
        if variant_id not in product["variants"]:
            raise ValueError("Variant not found")
        return product["variants"][variant_id]

    def _payment_method(self, user_id: str, payment_method_id: str) -> dict[str, Any]:
        user = self._user(user_id)
        if payment_method_id not in user["payment_methods"]:
            raise ValueError("Payment method not found")
        return user["payment_methods"][payment_method_id]

    @staticmethod
    def _pending(order: dict[str, Any]) -> bool:
        return "pending" in order["status"]

    @staticmethod
    def _item(order: dict[str, Any], item_id: str) -> dict[str, Any]:
        item = next((it for it in order["items"] if it["item_id"] == item_id), None)
        if item is None:
            raise ValueError(f"Item {item_id} not found")
        return item

    def _swap(self, order: dict[str, Any], item_ids: list[str], new_item_ids: list[str], *, held_error: str,
              count_error: str, distinct: bool) -> tuple[float, dict[str, Any] | None]:
        """The checks an exchange and an item modification share, in the official tools' order and words (each
        names its own messages; a modification also refuses an item swapped for itself): every old item held as
        often as named, as many new ids as old, each new one an available variant of the old one's product.
        Returns the price difference (unrounded) and the last new variant."""
        held = [it["item_id"] for it in order["items"]]
        for item_id in item_ids:
            if item_ids.count(item_id) > held.count(item_id):
                raise ValueError(held_error.format(item_id))
        if len(item_ids) != len(new_item_ids):
            raise ValueError(count_error)
        diff, variant = 0.0, None
        for item_id, new_id in zip(item_ids, new_item_ids):
            if distinct and item_id == new_id:
                raise ValueError("The new item id should be different from the old item id")
            item = self._item(order, item_id)
            variant = self._variant(item["product_id"], new_id)
            if not variant["available"]:
                raise ValueError(f"New item {new_id} not found or available")
            diff += variant["price"] - item["price"]
        return diff, variant

    # ---- tools --------------------------------------------------------------------------------------------------
    @tool("write")
    def cancel_pending_order(self, order_id: str, reason: str) -> dict[str, Any]:
        """Cancel a pending order (after the user confirms). Payments are refunded; gift-card payments at once.

        Args:
            order_id: The order id, starting with '#', e.g. '#W0000000'.
            reason: 'no longer needed' or 'ordered by mistake'.
        """
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ValueError("Non-pending order cannot be cancelled")
        if reason not in ("no longer needed", "ordered by mistake"):
            raise ValueError("Invalid reason")
        refunds = []
        for payment in order["payment_history"]:
            pid = payment["payment_method_id"]
            refunds.append({"transaction_type": "refund", "amount": payment["amount"], "payment_method_id": pid})
            method = self._payment_method(order["user_id"], pid)
            if _is_gift_card(method):
                method["balance"] = round(method["balance"] + payment["amount"], 2)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend(refunds)
        return order

    @tool("write")
    def exchange_delivered_order_items(self, order_id: str, item_ids: list[str], new_item_ids: list[str],
                                       payment_method_id: str) -> dict[str, Any]:
        """Exchange items of a delivered order for other items of the same product (once per order, after the user
        confirms).

        Args:
            order_id: The order id, starting with '#'.
            item_ids: The item ids to exchange (duplicates allowed).
            new_item_ids: The new item ids, position by position, of the same products.
            payment_method_id: The payment method that pays or receives the price difference.
        """
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ValueError("Non-delivered order cannot be exchanged")
        diff, _ = self._swap(order, item_ids, new_item_ids, held_error="Number of {} not found.",
                             count_error="The number of items to be exchanged should match.", distinct=False)
        diff = round(diff, 2)
        method = self._payment_method(order["user_id"], payment_method_id)
        if _is_gift_card(method) and method["balance"] < diff:
            raise ValueError("Insufficient gift card balance to pay for the price difference")
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        order["exchange_price_difference"] = diff
        return order

    @tool("read")
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """The user id of the user with this name (case-insensitive) and zip code.

        Args:
            first_name: First name, e.g. 'John'.
            last_name: Last name, e.g. 'Doe'.
            zip: Zip code, e.g. '12345'.
        """
        for user_id, user in self.db["users"].items():
            name = user["name"]
            if (name["first_name"].lower() == first_name.lower() and name["last_name"].lower() == last_name.lower()
                    and user["address"]["zip"] == zip):
                return user_id
        raise ValueError("User not found")

    @tool("read")
    def find_user_id_by_email(self, email: str) -> str:
        """The user id of the user with this email (case-insensitive).

        Args:
            email: The email address, e.g. 'someone@example.com'.
        """
        for user_id, user in self.db["users"].items():
            if user["email"].lower() == email.lower():
                return user_id
        raise ValueError("User not found")

    @tool("read")
    def get_order_details(self, order_id: str) -> dict[str, Any]:
        """An order's status and details.

        Args:
            order_id: The order id, starting with '#'.
        """
        return self._order(order_id)

    @tool("read")
    def get_product_details(self, product_id: str) -> dict[str, Any]:
        """A product's inventory: its variants (items) with options, price and availability.

        Args:
            product_id: The product id (not an item id).
        """
        return self._product(product_id)

    @tool("read")
    def get_item_details(self, item_id: str) -> dict[str, Any]:
        """One item's (variant's) details.

        Args:
            item_id: The item id (not a product id).
        """
        for product in self.db["products"].values():
            if item_id in product["variants"]:
                return product["variants"][item_id]
        raise ValueError("Item not found")

    @tool("read")
    def get_user_details(self, user_id: str) -> dict[str, Any]:
        """A user's details, orders included.

        Args:
            user_id: The user id, e.g. 'sara_doe_496'.
        """
        return self._user(user_id)

    @tool("read")
    def list_all_product_types(self) -> str:
        """Product names mapped to product ids (JSON, sorted by name)."""
        return json.dumps({p["name"]: p["product_id"] for p in self.db["products"].values()}, sort_keys=True)

    @tool("write")
    def modify_pending_order_address(self, order_id: str, address1: str, address2: str, city: str, state: str,
                                     country: str, zip: str) -> dict[str, Any]:
        """Change a pending order's shipping address (after the user confirms).

        Args:
            order_id: The order id, starting with '#'.
            address1: First address line.
            address2: Second address line, or ''.
            city: City.
            state: State, e.g. 'CA'.
            country: Country, e.g. 'USA'.
            zip: Zip code.
        """
        order = self._order(order_id)
        if not self._pending(order):
            raise ValueError("Non-pending order cannot be modified")
        order["address"] = _address(address1, address2, city, state, country, zip)
        return order

    @tool("write")
    def modify_pending_order_items(self, order_id: str, item_ids: list[str], new_item_ids: list[str],
                                   payment_method_id: str) -> dict[str, Any]:
        """Swap items of a pending order for other items of the same product (once per order, after the user
        confirms).

        Args:
            order_id: The order id, starting with '#'.
            item_ids: The item ids to change (duplicates allowed).
            new_item_ids: The new item ids, position by position.
            payment_method_id: The payment method that pays or receives the price difference.
        """
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ValueError("Non-pending order cannot be modified")
        diff, variant = self._swap(order, item_ids, new_item_ids, held_error="{} not found",
                                   count_error="The number of items to be exchanged should match", distinct=True)
        method = self._payment_method(order["user_id"], payment_method_id)
        if _is_gift_card(method) and method["balance"] < diff:
            raise ValueError("Insufficient gift card balance to pay for the new item")
        order["payment_history"].append({"transaction_type": "payment" if diff > 0 else "refund",
                                         "amount": abs(diff), "payment_method_id": payment_method_id})
        if _is_gift_card(method):
            method["balance"] = round(method["balance"] - diff, 2)
        for item_id, new_id in zip(item_ids, new_item_ids):
            item = self._item(order, item_id)
            # (as the official tool does: every changed item takes the price and options of the LAST new variant)
            item["item_id"] = new_id
            item["price"] = variant["price"]  # type: ignore[index]
            item["options"] = variant["options"]  # type: ignore[index]
        order["status"] = "pending (item modified)"
        return order

    @tool("write")
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> dict[str, Any]:
        """Pay a pending order with another payment method (after the user confirms).

        Args:
            order_id: The order id, starting with '#'.
            payment_method_id: The new payment method, e.g. 'gift_card_0000000'.
        """
        order = self._order(order_id)
        if not self._pending(order):
            raise ValueError("Non-pending order cannot be modified")
        method = self._payment_method(order["user_id"], payment_method_id)
        history = order["payment_history"]
        if len(history) != 1 or history[0]["transaction_type"] != "payment":
            raise ValueError("There should be exactly one payment for a pending order")
        if history[0]["payment_method_id"] == payment_method_id:
            raise ValueError("The new payment method should be different from the current one")
        amount = history[0]["amount"]
        if _is_gift_card(method) and method["balance"] < amount:
            raise ValueError("Insufficient gift card balance to pay for the order")
        old_id = history[0]["payment_method_id"]
        history.extend([{"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
                        {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id}])
        if _is_gift_card(method):
            method["balance"] = round(method["balance"] - amount, 2)
        old = self._payment_method(order["user_id"], old_id)
        if _is_gift_card(old):
            old["balance"] = round(old["balance"] + amount, 2)
        return order

    @tool("write")
    def modify_user_address(self, user_id: str, address1: str, address2: str, city: str, state: str, country: str,
                            zip: str) -> dict[str, Any]:
        """Change a user's default address (after the user confirms).

        Args:
            user_id: The user id.
            address1: First address line.
            address2: Second address line, or ''.
            city: City.
            state: State.
            country: Country.
            zip: Zip code.
        """
        user = self._user(user_id)
        user["address"] = _address(address1, address2, city, state, country, zip)
        return user

    @tool("write")
    def return_delivered_order_items(self, order_id: str, item_ids: list[str],
                                     payment_method_id: str) -> dict[str, Any]:
        """Request the return of items of a delivered order (after the user confirms).

        Args:
            order_id: The order id, starting with '#'.
            item_ids: The item ids to return (duplicates allowed).
            payment_method_id: Where the refund goes: the original payment method or a gift card.
        """
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ValueError("Non-delivered order cannot be returned")
        user = self._user(order["user_id"])
        method = self._payment_method(user["user_id"], payment_method_id)
        if not _is_gift_card(method) and payment_method_id != order["payment_history"][0]["payment_method_id"]:
            raise ValueError("Payment method should be the original payment method")
        held = [it["item_id"] for it in order["items"]]
        for item_id in item_ids:
            if item_ids.count(item_id) > held.count(item_id):
                raise ValueError("Some item not found")
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return order

    @tool("generic")
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the user over to a human agent, with a summary of the issue (only when asked, or when the policy and
        tools cannot solve it).

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"
