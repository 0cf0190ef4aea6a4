"""An application to build, as every command that builds one names it:
`ukl build`'s INPUT, `ukl bench boot --apps` and the specializer's
rebuilds. One type, so that the image built for one configuration and
the images built for another (the specializer's recording under `linux`,
its result under the specialized configuration) are the same
application built the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ukltool.apps import recipes
from ukltool.build import image, project
from ukltool.util.errors import UklError


@dataclass
class AppTarget:
    """A recipe, a project directory or C files, with the build options
    that hold for every configuration it is built for."""
    label: str                     # as the user named it
    recipe: recipes.Recipe | None = None
    sources: list[Path] = field(default_factory=list)  # C files, or one project directory
    name: str | None = None        # --name (files and directories)
    freestanding: bool = False
    userspace: bool = False        # busybox and a shell in the image
    perf: bool = False
    cflags: list[str] = field(default_factory=list)
    files: list[tuple[Path, str]] = field(default_factory=list)   # --file SRC:DEST
    overlays: list[Path] = field(default_factory=list)           # --overlay DIR
    build_system: str = "auto"     # a directory's: project.SYSTEMS
    configure_args: list[str] = field(default_factory=list)      # after a recipe's own
    make_args: list[str] = field(default_factory=list)
    compression: str | None = None  # the kernel's (None: the configuration's)
    optimize: str | None = None

    @property
    def record_name(self) -> str:
        """What the specializer's recording of it is kept under."""
        return self.recipe.name if self.recipe is not None else str(self.sources[0]).strip("/")

    def spec(self, config: str, outdir: Path, extra: list[tuple[Path, str]] | None = None) -> image.BuildSpec:
        """The build of this application for CONFIG into OUTDIR, with EXTRA
        files in its image besides its own."""
        files = [*self.files, *(extra or [])]
        if self.recipe is not None:
            s = recipes.image_spec(self.recipe, config, outdir, files, self.configure_args, self.make_args,
                                   self.overlays)
            s.userspace = self.userspace
        else:
            opts = project.Options(system=self.build_system, configure_args=list(self.configure_args),
                                   make_args=list(self.make_args))
            s = image.BuildSpec(list(self.sources), config, outdir, self.name, self.freestanding, self.userspace,
                                list(self.cflags), files, list(self.overlays), opts)
        s.perf, s.compression, s.optimize = self.perf, self.compression, self.optimize
        return s


def recipe_target(name: str, label: str | None = None) -> AppTarget:
    """The application recipe NAME; a library recipe is refused."""
    r = recipes.load(name)
    if r.build.library:
        users = [n for n in recipes.names() if name in recipes.load(n).depends]
        raise UklError(f"'{name}' is a library recipe: it is built as a dependency of an application",
                       "build an application that depends on it: " + (", ".join(users) or "none"))
    return AppTarget(label or name, recipe=r)


def resolve(spec: str, what: str) -> AppTarget:
    """SPEC as `ukl build` reads it: an existing path (file or directory)
    wins, else a recipe name; anything else is an error naming WHAT (the
    option or argument it came from)."""
    path = Path(spec)
    if path.exists():   # named as given, apart from a recipe of the same name
        return AppTarget(spec, sources=[path])
    if "/" in spec or path.suffix:
        raise UklError(f"{what}: {spec} does not exist", "name a C file, a project directory or a recipe")
    if spec not in recipes.names():
        raise UklError(f"{what}: '{spec}' is neither a file, a directory nor a recipe",
                       "recipes (apps/): " + ", ".join(recipes.names()))
    return recipe_target(spec)
