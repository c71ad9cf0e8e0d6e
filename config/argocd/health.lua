-- Argo CD health check for Numaplane's five kinds: PipelineRollout, MonoVertexRollout,
-- ISBServiceRollout, NumaflowControllerRollout and NumaflowController. The same script serves
-- every kind; what differs (the pause condition, the user's pause field) is chosen by obj.kind.
-- Lua 5.1, as Argo CD embeds it.

local hs = {}

local function condition(status, type)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function describe(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

-- The condition reporting a pause, and the child template the user pauses through.
local pause_conditions = {
  PipelineRollout = "PipelinePausingOrPaused",
  MonoVertexRollout = "MonoVertexPausingOrPaused",
  ISBServiceRollout = "PausingPipelines",
  NumaflowControllerRollout = "PausingPipelines",
}
local templates = {
  PipelineRollout = "pipeline",
  MonoVertexRollout = "monoVertex",
}

-- Whether the user asked for the child to be paused (spec.<child>.spec.lifecycle.desiredPhase).
local function user_paused(obj)
  local field = templates[obj.kind]
  if field == nil or obj.spec == nil or obj.spec[field] == nil then
    return false
  end
  local spec = obj.spec[field].spec
  return spec ~= nil and spec.lifecycle ~= nil and spec.lifecycle.desiredPhase == "Paused"
end

local status = obj.status
if status == nil or status.phase == nil or status.phase == "" then
  hs.status = "Progressing"
  hs.message = "Waiting for the Numaplane controller to report a status"
  return hs
end

if status.phase == "Failed" then
  hs.status = "Degraded"
  hs.message = status.message or "Failed"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe generation " .. generation
  return hs
end

-- A failed trial keeps the rollout Pending until the spec changes or the trial is force-promoted.
local progressive = condition(status, "ProgressiveUpgradeSucceeded")
if progressive ~= nil and progressive.status == "False" and status.upgradeInProgress == "Progressive" then
  hs.status = "Degraded"
  hs.message = "Progressive upgrade failed: " .. describe(progressive, "assessment failed")
  return hs
end

local pause_type = pause_conditions[obj.kind]
local pause = nil
if pause_type ~= nil then
  pause = condition(status, pause_type)
end
if pause ~= nil and pause.status == "True" then
  if pause_type == "PausingPipelines" then
    hs.status = "Progressing"
    hs.message = "Pausing pipelines before an update: " .. describe(pause, "pause needed for update")
    return hs
  end
  -- Paused by the user: Suspended once the pause is complete. A pause of a pause-and-drain
  -- upgrade is part of the upgrade: Progressing.
  local pausing = pause.reason == "PipelinePausing"
  if user_paused(obj) and not pausing then
    hs.status = "Suspended"
    hs.message = describe(pause, "Paused")
    return hs
  end
  hs.status = "Progressing"
  if user_paused(obj) then
    hs.message = describe(pause, "Pausing")
  elseif status.phase == "Pending" and status.message ~= nil and status.message ~= "" then
    hs.message = status.message
  else
    hs.message = "Pause-and-drain upgrade: " .. describe(pause, "pausing")
  end
  return hs
end

if status.phase == "Pending" then
  hs.status = "Progressing"
  hs.message = status.message or "Progressing"
  return hs
end

-- Deployed: the child's health decides.
local healthy = condition(status, "ChildResourcesHealthy")
if healthy == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the health of the child resources"
  return hs
end
if healthy.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(healthy, "Healthy")
  return hs
end
if healthy.status == "False" and healthy.reason ~= "Progressing" then
  hs.status = "Degraded"
  hs.message = describe(healthy, healthy.reason or "Unhealthy")
  return hs
end
hs.status = "Progressing"
hs.message = describe(healthy, "Progressing")
return hs
