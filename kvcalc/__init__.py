"""kvcalc: LLM inference memory and speed, from the architecture up.

As a library: kvcalc.cache, kvcalc.roofline, kvcalc.fit, kvcalc.generate, kvcalc.compare and kvcalc.plan (kvcalc/api.py)
return the result models that `--format json` prints. They load on first use, so `import kvcalc` stays cheap.
"""

import sys
import types

__version__ = "0.1.0"
__all__ = ["cache", "roofline", "fit", "generate", "compare", "plan", "__version__"]


def _api(name: str) -> property:
    def get(self):  # noqa: ANN001, ANN202
        from kvcalc import api

        return getattr(api, name)

    def keep(self, value):  # noqa: ANN001, ANN202
        # NOTE: importing a subpackage whose name is also an API function binds it as the package
        # attribute of that name; the API function keeps the name, the module stays in sys.modules.
        self.__dict__[f"_{name}_module"] = value

    return property(get, keep, doc=f"kvcalc.api.{name}, imported on first use.")


class _Package(types.ModuleType):
    # NOTE: properties rather than a module __getattr__: __getattr__ only runs for missing names, and
    # a subpackage of the same name would be bound here by the import system and hide the function.
    cache = _api("cache")
    roofline = _api("roofline")
    fit = _api("fit")
    generate = _api("generate")
    compare = _api("compare")
    plan = _api("plan")


sys.modules[__name__].__class__ = _Package
