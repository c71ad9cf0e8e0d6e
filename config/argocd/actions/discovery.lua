-- Argo CD action discovery for Numaplane rollouts and the children they upgrade progressively.
-- One script for every kind: it offers the actions that exist for obj.kind and disables those
-- that don't apply to the object's current state. Lua 5.1, as Argo CD embeds it.

local actions = {}

local function label(name)
  if obj.metadata.labels == nil then
    return nil
  end
  return obj.metadata.labels[name]
end

local function annotation(name)
  if obj.metadata.annotations == nil then
    return nil
  end
  return obj.metadata.annotations[name]
end

-- spec.<field>.spec.lifecycle.desiredPhase, "Running" when unset.
local function desired_phase(field)
  local t = obj.spec and obj.spec[field]
  local spec = t and t.spec
  local lifecycle = spec and spec.lifecycle
  if lifecycle == nil or lifecycle.desiredPhase == nil or lifecycle.desiredPhase == "" then
    return "Running"
  end
  return lifecycle.desiredPhase
end

local function force_promote_configured()
  local strategy = obj.spec and obj.spec.strategy
  local progressive = strategy and strategy.progressive
  return progressive ~= nil and progressive.forcePromote == true
end

local templates = { PipelineRollout = "pipeline", MonoVertexRollout = "monoVertex" }

local field = templates[obj.kind]
if field ~= nil then
  local paused = desired_phase(field) == "Paused"
  actions["pause"] = { ["disabled"] = paused, ["iconClass"] = "fa fa-fw fa-pause-circle" }
  actions["resume"] = { ["disabled"] = not paused, ["iconClass"] = "fa fa-fw fa-play-circle" }
end

if obj.kind == "PipelineRollout" then
  local allowed = annotation("numaplane.numaproj.io/allow-data-loss") == "true"
  actions["allow-data-loss"] = { ["disabled"] = allowed, ["displayName"] = "Allow Data Loss" }
  actions["disallow-data-loss"] = { ["disabled"] = not allowed, ["displayName"] = "Disallow Data Loss" }
end

if obj.kind == "PipelineRollout" or obj.kind == "MonoVertexRollout" or obj.kind == "ISBServiceRollout" then
  local on = force_promote_configured()
  actions["enable-force-promote"] = { ["disabled"] = on, ["displayName"] = "Enable Force Promote" }
  actions["disable-force-promote"] = { ["disabled"] = not on, ["displayName"] = "Disable Force Promote" }
end

-- Children: only a trial can be force-promoted, aborted or (failed) retried (not once force-promoted, which wins),
-- only a recyclable pipeline marked for deletion.
if obj.kind == "Pipeline" or obj.kind == "MonoVertex" or obj.kind == "InterStepBufferService" then
  local state = label("numaplane.numaproj.io/upgrade-state")
  local trial = state == "trial" or state == "in-progress"
  local forced = label("numaplane.numaproj.io/force-promote") ~= nil
  local aborted = label("numaplane.numaproj.io/abort") ~= nil
  actions["force-promote"] = { ["disabled"] = not trial or forced, ["displayName"] = "Force Promote" }
  actions["abort"] = {
    ["disabled"] = not trial or forced or aborted,
    ["displayName"] = "Abort Upgrade",
    ["iconClass"] = "fa fa-fw fa-stop-circle",
  }
  -- Only a failed trial is retried, once.
  local failed = label("numaplane.numaproj.io/progressive-result-state") == "failed"
  local retried = label("numaplane.numaproj.io/retry") ~= nil
  actions["retry"] = {
    ["disabled"] = not trial or not failed or forced or retried,
    ["displayName"] = "Retry Upgrade",
    ["iconClass"] = "fa fa-fw fa-redo",
  }
end

if obj.kind == "Pipeline" then
  local recyclable = label("numaplane.numaproj.io/upgrade-state") == "recyclable"
  local marked = annotation("numaplane.numaproj.io/marked-for-deletion") == "true"
  actions["mark-for-deletion"] = {
    ["disabled"] = not recyclable or marked,
    ["displayName"] = "Delete Without Draining",
    ["iconClass"] = "fa fa-fw fa-trash",
  }
end

return actions
