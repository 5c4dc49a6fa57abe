"""The wheel's packages: outbox's own as found, and the top-level templates/ and static/.

pyproject.toml can either find packages or list them, not both: a package added under
outbox/ is found here, and templates/ and static/ join as outbox.templates and
outbox.static. Where they come from (package-dir) and which files of each the wheel
takes (package-data) stay in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

setup(packages=[*find_namespace_packages(include=["outbox", "outbox.*"]), "outbox.templates",
                "outbox.static"])  # fmt: skip
