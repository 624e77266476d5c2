-- What both end-to-end drivers (e2e_driver.lua, builtin_driver.lua) share, inside `nvim --headless -u NONE`
-- on Neovim 0.7 and 0.12: waiting in a coroutine, typing key by key, and writing the result the Python test
-- reads. Load it with `dofile` from the driver's own folder (`-u NONE` puts no test folder on the path).
local M = {}

local uv = vim.uv or vim.loop -- vim.uv from 0.10

--- Let Neovim run for `ms`; only from inside the driver's coroutine (`M.run`).
---@param ms integer
function M.sleep(ms)
  local co = coroutine.running()
  vim.defer_fn(function()
    assert(coroutine.resume(co))
  end, ms)
  coroutine.yield()
end

--- Wait until `predicate()` holds, or fail after `timeout_ms`; note in `result.steps` how long it took.
---@param result table
---@param what string
---@param predicate fun(): any
---@param timeout_ms integer
function M.wait_for(result, what, predicate, timeout_ms)
  local started = uv.now()
  while not predicate() do
    if uv.now() - started > timeout_ms then
      error('timed out waiting for ' .. what)
    end
    M.sleep(10)
  end
  table.insert(result.steps, { what = what, ms = uv.now() - started })
end

--- The keys that type `text` with nvim_input, one per character.
---@param text string
---@return string[]
function M.keys_of(text)
  local keys = {}
  for _, ch in ipairs(vim.fn.split(text, '\\zs')) do
    table.insert(keys, ch == '<' and '<lt>' or ch)
  end
  return keys
end

--- Write `result` as JSON to $SPECLS_E2E_RESULT.
---@param result table
function M.write_result(result)
  local file = assert(io.open(vim.env.SPECLS_E2E_RESULT, 'w'))
  file:write(vim.json.encode(result))
  file:close()
end

--- Run `main` in a coroutine (so it can sleep), record whether it failed, write the result and quit.
---@param result table
---@param main fun()
function M.run(result, main)
  coroutine.wrap(function()
    local ok, err = pcall(main)
    if not ok then
      result.ok = false
      result.error = tostring(err)
    end
    pcall(M.write_result, result)
    vim.cmd('qa!')
  end)()
end

return M
