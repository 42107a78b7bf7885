"""An HTML page's elements, parsed with the standard library: shared by the report tests."""

from __future__ import annotations

from html.parser import HTMLParser


class _Elements(HTMLParser):
    """The page's elements with a class, their attributes, and its visible text."""

    def __init__(self):
        super().__init__()
        self.found: list[tuple[str, str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("class"):
            self.found.append((tag, attrs["class"], attrs))

    def handle_data(self, data):
        self.text.append(data)

    def of(self, cls: str) -> list[dict]:
        return [a for _, c, a in self.found if c == cls]


def _parse(page: str) -> _Elements:
    parsed = _Elements()
    parsed.feed(page)
    return parsed
