"""What every profile table shares: the strict base model, the engine and launcher names."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

DEFAULT_PROFILE = "llamacpp-gemma3-270m"


# an engine module's name (perfgate.engines finds them; an unknown one is a ProfileError
# naming the supported ones when the run starts)
EngineName = str


LauncherName = Literal["process", "docker", "ssh", "attach"]


ArgValue = str | int | float | bool | list[str | int | float] | dict[str, object]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
