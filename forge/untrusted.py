"""Text that came from outside (a server's answer, a log line, a file's content), made safe to show.

A terminal acts on control characters instead of showing them: an ANSI escape in a served model
id can clear the screen or set the window title, a carriage return or newline inside a field can
write over a line or forge a `RESULT: PASS` line of its own. Everything verify/ and forge print or
write to a text report of what such a source said goes through `visible` first.
"""
from __future__ import annotations


def visible(text: object) -> str:
    """`text` with every character that is not printable (ESC, CR, LF, TAB, BS, DEL, the C1
    controls, bidirectional overrides and other format characters) written as its Python escape
    (\\x1b, \\r, \\n, \\u202e): shown, never acted on. Printable text, non-ASCII letters included,
    stays as it is."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def visible_lines(text: str) -> str:
    """`visible` for each line of a multi-line text the program composed itself (a table, a
    Markdown report): its own line breaks stay, a lone carriage return or any other control
    character inside a line is escaped."""
    return "\n".join(visible(line) for line in text.split("\n"))
