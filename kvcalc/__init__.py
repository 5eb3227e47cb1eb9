"""kvcalc: LLM inference memory and speed, from the architecture up.

As a library: kvcalc.cache, kvcalc.roofline, kvcalc.fit, kvcalc.generate, kvcalc.compare and kvcalc.plan (kvcalc/api/)
return the result models that `--format json` prints. They load on first use, so `import kvcalc` stays cheap.
"""

import sys
import types

__version__ = "0.1.0"
__all__ = ["cache", "roofline", "fit", "generate", "compare", "plan", "__version__"]


class _FunctionAndPackage:
    """kvcalc.plan once the subpackage kvcalc.plan is imported: calling it calls the API function, its
    attributes are the subpackage's, so `import kvcalc.plan.fit as fit` keeps working beside kvcalc.plan(...)."""

    def __init__(self, function, module) -> None:  # noqa: ANN001
        self._function, self._module = function, module
        self.__doc__ = function.__doc__

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        return self._function(*args, **kwargs)

    def __getattr__(self, attr: str):  # noqa: ANN204
        return getattr(self._module, attr)


def _api(name: str) -> property:
    def get(self):  # noqa: ANN001, ANN202
        from kvcalc import api

        module = self.__dict__.get(f"_{name}_module")
        function = getattr(api, name)
        return function if module is None else _FunctionAndPackage(function, module)

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
