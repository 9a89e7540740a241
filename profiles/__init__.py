"""Named targets for `envsolver make --profile NAME`, installed as the package data `envsolver.profiles`."""
