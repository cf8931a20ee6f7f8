"""Maps the repository's top-level folders onto the installed namespace ``nagare``.

The user's design card fixes the repository layout (app/, engine/, shaders/, presets/ at the top);
installed, they become nagare.app, nagare.engine, nagare.shaders and nagare.presets.
"""
from setuptools import find_packages, setup

TOP = ["app", "engine", "shaders", "presets"]
packages = ["nagare"]
package_dir = {"nagare": "nagare"}
for top in TOP:
    for sub in [top] + [f"{top}.{p}" for p in find_packages(top)]:
        name = "nagare." + sub
        packages.append(name)
        package_dir[name] = sub.replace(".", "/")

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={
        "nagare.shaders": ["cuda/**/*.cu", "cuda/**/*.cuh", "cuda/*.cuh", "glsl/*.glsl"],
        "nagare.presets": ["*.toml", "masks/*.png"],
    },
    include_package_data=True,
)
