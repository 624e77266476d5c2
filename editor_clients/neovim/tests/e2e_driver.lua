-- End-to-end driver, run inside `nvim --headless -u NONE`: loads the plugin, starts the real server, types
-- into a buffer key by key (nvim_input, so insert-mode autocommands fire as for a person), waits for ghost
-- text, accepts it and writes what happened to $SPECLS_E2E_RESULT as JSON. Inputs come from environment
-- variables set by tests/e2e/test_neovim_e2e.py.
local support = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':h') .. '/driver_support.lua')
local env = vim.env
local result = { steps = {} }
local cancels = 0 -- $/cancelRequest sent by the plugin while typing

local function wait_for(what, predicate, timeout_ms)
  support.wait_for(result, what, predicate, timeout_ms)
end

local function type_keys(keys, delay_ms)
  for _, key in ipairs(keys) do
    vim.api.nvim_input(key)
    support.sleep(delay_ms)
  end
end

local function main()
  vim.opt.runtimepath:append(env.SPECLS_PLUGIN_DIR)
  local specls = require('specls')
  local use_builtin = ({ ['true'] = true, ['false'] = false })[env.SPECLS_E2E_USE_BUILTIN or '']
  specls.setup({
    cmd = vim.fn.json_decode(env.SPECLS_E2E_CMD),
    settings = vim.fn.json_decode(env.SPECLS_E2E_SETTINGS),
    use_builtin = use_builtin == nil and 'auto' or use_builtin,
    -- { host, port, token_file }: connect to a running `specls serve --tcp` instead of starting one
    tcp = env.SPECLS_E2E_TCP and vim.fn.json_decode(env.SPECLS_E2E_TCP) or nil,
  })
  local timeout = tonumber(env.SPECLS_E2E_TIMEOUT_MS or '60000')
  vim.cmd('edit ' .. vim.fn.fnameescape(env.SPECLS_E2E_FILE))
  local bufnr = vim.api.nvim_get_current_buf()
  -- What Python's filetype plugin sets (-u NONE loads none): indent with spaces, so autoindent copies a
  -- method's 8 spaces as spaces and not as a tab.
  vim.bo[bufnr].expandtab = true
  local server = require('specls.server')
  wait_for('server ready', function()
    return server.status.state == 'ready' or server.status.state == 'error'
  end, timeout)
  result.status = server.status
  local client = server.client()
  local cancel_request = client.cancel_request
  client.cancel_request = function(...)
    cancels = cancels + 1
    return cancel_request(...)
  end
  -- Every inline request and what came back, for the failure message (and the timing checks).
  result.requests = {}
  local request = client.request
  client.request = function(method, params, handler, ...)
    if method ~= 'textDocument/inlineCompletion' then
      return request(method, params, handler, ...)
    end
    local entry = { position = params.position, sent = vim.loop.now() }
    table.insert(result.requests, entry)
    return request(method, params, function(err, answer, ...)
      entry.ms = vim.loop.now() - entry.sent
      entry.error = err and err.message or nil
      local items = type(answer) == 'table' and (answer.items or answer) or {}
      entry.text = items[1] and items[1].insertText or nil
      return handler(err, answer, ...)
    end, ...)
  end
  if server.status.state ~= 'ready' then
    error('server not ready: ' .. vim.inspect(server.status))
  end

  -- Open a line below line $SPECLS_E2E_LINE (default: the last one) and type, one key at a time. With
  -- $SPECLS_E2E_PAUSE_MS the user first sits there that long, as someone reading a file they just opened.
  local below = tonumber(env.SPECLS_E2E_LINE or '') or vim.api.nvim_buf_line_count(bufnr)
  vim.api.nvim_win_set_cursor(0, { below, 0 })
  support.sleep(tonumber(env.SPECLS_E2E_PAUSE_MS or '0'))
  type_keys({ 'o' }, 20)
  local typing_started = vim.loop.now()
  type_keys(support.keys_of(env.SPECLS_E2E_TYPE), tonumber(env.SPECLS_E2E_KEY_DELAY_MS or '30'))
  result.mode_after_typing = vim.api.nvim_get_mode().mode
  result.line_after_typing = vim.api.nvim_get_current_line()
  result.cursor_after_typing = vim.api.nvim_win_get_cursor(0)
  -- The model is loaded by now: a suggestion that takes longer than this is not coming.
  local ghost_timeout_ms = tonumber(env.SPECLS_E2E_GHOST_TIMEOUT_MS or '30000')
  wait_for('ghost text', function()
    return specls.ghost_text(bufnr) ~= nil
  end, ghost_timeout_ms)
  result.ghost_ms_after_first_key = vim.loop.now() - typing_started
  result.first_ghost = specls.ghost_text(bufnr)
  local expected_ghost = env.SPECLS_E2E_EXPECT_GHOST -- then wait until the ghost text grows into this
  if expected_ghost then
    wait_for('the expected ghost text', function()
      local shown = specls.ghost_text(bufnr)
      return shown ~= nil and shown.text == expected_ghost
    end, ghost_timeout_ms)
  end
  result.ghost = specls.ghost_text(bufnr)
  result.cursor_before_accept = vim.api.nvim_win_get_cursor(0)
  result.line_before_accept = vim.api.nvim_get_current_line()
  local lines_before = vim.api.nvim_buf_line_count(bufnr)

  local scenario = env.SPECLS_E2E_SCENARIO or 'accept'
  local keys = { accept = '<Tab>', accept_word = '<M-Right>', accept_line = '<M-Down>', dismiss = '<C-]>' }
  vim.api.nvim_input(keys[scenario])
  if scenario == 'dismiss' then
    wait_for('ghost text gone', function()
      return specls.ghost_text(bufnr) == nil
    end, 5000)
  else
    wait_for('accepted text in the buffer', function()
      return vim.api.nvim_buf_line_count(bufnr) ~= lines_before
        or vim.api.nvim_get_current_line() ~= result.line_before_accept
    end, 5000)
  end
  support.sleep(100) -- let the notifications and the executeCommand go out
  result.ghost_after = specls.ghost_text(bufnr) or vim.NIL
  result.lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  result.cursor_after = vim.api.nvim_win_get_cursor(0)
  result.cancel_requests = cancels
  local stats = server.client().request_sync('specls/stats', {}, 5000, bufnr)
  result.stats = stats and stats.result
  result.ok = true
end

support.run(result, main)
