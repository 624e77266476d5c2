"""A small pantry tracker: the sample file `specls demo` types out, written for the demo."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta


@dataclass
class Item:
    name: str
    quantity: int
    unit: str
    best_before: date | None = None
    tags: set[str] = field(default_factory=set)

    def is_expired(self, today: date) -> bool:
        return self.best_before is not None and self.best_before < today

    def expires_within(self, today: date, days: int) -> bool:
        if self.best_before is None:
            return False
        return today <= self.best_before <= today + timedelta(days=days)


class Pantry:
    def __init__(self) -> None:
        self.items: dict[str, Item] = {}

    def add(self, name: str, quantity: int, unit: str = "pcs", best_before: date | None = None) -> Item:
        if quantity <= 0:
            raise ValueError(f"quantity must be positive, got {quantity}")
        item = self.items.get(name)
        if item is None:
            item = Item(name, quantity, unit, best_before)
            self.items[name] = item
        else:
            item.quantity += quantity
            if best_before is not None and (item.best_before is None or best_before < item.best_before):
                item.best_before = best_before
        return item

    def take(self, name: str, quantity: int) -> int:
        item = self.items.get(name)
        if item is None:
            return 0
        taken = min(quantity, item.quantity)
        item.quantity -= taken
        if item.quantity == 0:
            del self.items[name]
        return taken

    def tag(self, name: str, *tags: str) -> None:
        self.items[name].tags.update(tags)

    def with_tag(self, tag: str) -> list[Item]:
        return [item for item in self.items.values() if tag in item.tags]

    def expired(self, today: date) -> list[Item]:
        return [item for item in self.items.values() if item.is_expired(today)]

    def expiring_soon(self, today: date, days: int = 3) -> list[Item]:
        soon = [item for item in self.items.values() if item.expires_within(today, days)]
        return sorted(soon, key=lambda item: item.best_before or today)

    def shopping_list(self, wanted: dict[str, int]) -> dict[str, int]:
        missing: dict[str, int] = {}
        for name, quantity in wanted.items():
            have = self.items[name].quantity if name in self.items else 0
            if have < quantity:
                missing[name] = quantity - have
        return missing


def summary(pantry: Pantry, today: date) -> str:
    lines = [f"{len(pantry.items)} items on {today.isoformat()}"]
    for item in sorted(pantry.items.values(), key=lambda item: item.name):
        note = " (expired)" if item.is_expired(today) else ""
        lines.append(f"  {item.name}: {item.quantity} {item.unit}{note}")
    return "\n".join(lines)
