"""griffe extensions for tfring's docstrings: Keras-style examples and lists, tuple-assigned constants.

tfring's docstrings follow Keras' (STYLE.md), which Google style, as griffe parses it, reads
differently in two places; `KerasDocstrings` rewrites both before griffe parses a docstring, so the
docstrings stay as they are in the source:
- an `Example:` title, a blank line, then the `>>>` lines at the docstring's own indentation:
  Google style wants them indented under the title with no blank line below it, or griffe leaves
  them in the text and Markdown renders `>>> x` as a quotation. Each such section (to the next
  section title or the docstring's end) becomes an indented `Examples:` section, shown as code.
- a list right below a line of text (`Differences:` then `- ...`): Markdown (Python-Markdown, as
  MkDocs runs it) starts a list only after a blank line, or runs the items into the paragraph.
  The description (the text before the first section) gets that blank line.

`TupleConstants` below documents the names of a tuple assignment, which griffe skips.

mkdocs.yml loads both (`extensions:`); `exclude_docs` keeps this folder off the site.
"""

import ast
import inspect
import re

import griffe

_TITLE = re.compile(r"^Examples?:\s*$")
# The section titles of Google style (griffe's) and Keras' docstrings, at the docstring's indentation.
_NEXT_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|"
                           r"Returns?|Yields|Receives|Raises|Exceptions|Warns|Warnings?|Examples?|References?|Notes?|"
                           r"Attributes|Methods|Functions|Classes|Modules|See Also|Call arguments|Input shape|"
                           r"Output shape):\s*$")


def google_examples(text):
    """`text` (a docstring, dedented) with each Keras-style `Example:` section made Google-style.

    Args:
        text: the docstring.

    Returns:
        The docstring; unchanged when it has no unindented example section.

    Example:

    >>> google_examples("Adds.\\n\\nExample:\\n\\n>>> add(1, 2)\\n3")
    'Adds.\\n\\nExamples:\\n    >>> add(1, 2)\\n    3'
    """
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        if not _TITLE.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        body_start = i + 1
        while body_start < len(lines) and not lines[body_start].strip():
            body_start += 1
        end = body_start
        while end < len(lines) and not _NEXT_SECTION.match(lines[end]):
            end += 1
        if body_start == end or lines[body_start].startswith(" "):  # empty, or Google-style already
            out.append(lines[i])
            i += 1
            continue
        body = lines[body_start:end]
        while body and not body[-1].strip():
            body.pop()
        out.append("Examples:")
        out.extend("    " + line if line.strip() else "" for line in body)
        if end < len(lines):
            out.append("")
        i = end
    return "\n".join(out)


_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.) ")


def lists_after_blank_lines(text):
    """`text` (a docstring, dedented) with a blank line before each list that follows a line of text,
    in the description (before the first section title; sections are griffe's to parse).

    Args:
        text: the docstring.

    Returns:
        The docstring.

    Example:

    >>> lists_after_blank_lines("Two kinds:\\n- a\\n  more of a\\n- b\\n\\nArgs:\\n    x: y")
    'Two kinds:\\n\\n- a\\n  more of a\\n- b\\n\\nArgs:\\n    x: y'
    """
    out, in_list, in_fence, in_sections = [], False, False, False
    for line in text.split("\n"):
        if _NEXT_SECTION.match(line):
            in_sections = True
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        if not line.strip():
            in_list = False
        elif not in_fence and not in_sections and _LIST_ITEM.match(line):
            if not in_list and out and out[-1].strip():
                out.append("")
            in_list = True
        out.append(line)
    return "\n".join(out)


class KerasDocstrings(griffe.Extension):
    """Rewrites every docstring's Keras-style example sections and lists as it is read."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = lists_after_blank_lines(google_examples(obj.docstring.value))


class TupleConstants(griffe.Extension):
    """Documents the names of a module-level tuple assignment followed by a docstring.

    griffe reads `a = 1` followed by a string as a documented attribute, but skips `a, b = 1, 2`
    (tfring.horovod.basics binds Horovod's reduce ops `Average, Sum, ...` that way); this gives
    each name of such an assignment the docstring below it and its own value.
    """

    def on_module_members(self, *, node, mod, **kwargs):
        body = getattr(node, "body", [])
        for statement, following in zip(body, body[1:]):
            if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Tuple) and isinstance(statement.value, ast.Tuple)
                    and len(statement.targets[0].elts) == len(statement.value.elts)
                    and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                continue
            for target, value in zip(statement.targets[0].elts, statement.value.elts):
                if not isinstance(target, ast.Name) or target.id in mod.members:
                    continue
                attribute = griffe.Attribute(target.id, lineno=statement.lineno, endlineno=statement.end_lineno,
                                             value=ast.unparse(value))
                attribute.labels.add("module-attribute")
                attribute.docstring = griffe.Docstring(inspect.cleandoc(following.value.value),
                                                       lineno=following.lineno, endlineno=following.end_lineno,
                                                       parent=attribute)
                mod.set_member(target.id, attribute)
