-- End-to-end driver for Neovim's own client (0.12+, no plugin set-up), run inside `nvim --headless -u NONE`.
-- It runs the set-up file $SPECLS_E2E_SETUP (editor_clients/neovim/builtin_client.lua), pointing only the
-- command and the server settings at the test's, opens a file, types key by key (nvim_input, so
-- InsertEnter/CursorMovedI fire as for a person), reads the ghost text Neovim draws and accepts it. Writes
-- what happened to $SPECLS_E2E_RESULT as JSON; tests/e2e/test_neovim_builtin.py holds the assertions.
local support = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':h') .. '/driver_support.lua')
local env = vim.env
local result = { steps = {}, keys = {} }
local namespace = vim.api.nvim_create_namespace('nvim.lsp.inline_completion')

local function wait_for(what, predicate, timeout_ms)
  support.wait_for(result, what, predicate, timeout_ms)
end

--- The ghost text as drawn: the extmark's inline text, then its virtual lines.
local function ghost_text(bufnr)
  local marks = vim.api.nvim_buf_get_extmarks(bufnr, namespace, 0, -1, { details = true })
  if #marks == 0 then
    return nil
  end
  local _, row, col, details = unpack(marks[1])
  local lines = {}
  for _, chunks in ipairs({ details.virt_text or {}, unpack(details.virt_lines or {}) }) do
    local line = {}
    for _, chunk in ipairs(chunks) do
      table.insert(line, chunk[1])
    end
    table.insert(lines, table.concat(line))
  end
  return { row = row, col = col, text = table.concat(lines, '\n') }
end

local function type_text(text, delay_ms)
  for _, key in ipairs(support.keys_of(text)) do
    vim.api.nvim_input(key)
    table.insert(result.keys, { key = key, at = vim.uv.now() })
    support.sleep(delay_ms)
  end
end

local function main()
  vim.cmd('filetype on') -- as in a normal start; `-u NONE` leaves it off, and vim.lsp.enable needs it
  vim.opt.runtimepath:append(env.SPECLS_PLUGIN_DIR) -- as the set-up asks, for its accept helper
  dofile(env.SPECLS_E2E_SETUP)
  vim.lsp.config('specls', {
    cmd = vim.json.decode(env.SPECLS_E2E_CMD),
    init_options = vim.json.decode(env.SPECLS_E2E_SETTINGS),
  })
  local timeout = tonumber(env.SPECLS_E2E_TIMEOUT_MS or '60000')
  vim.cmd('edit ' .. vim.fn.fnameescape(env.SPECLS_E2E_FILE))
  local bufnr = vim.api.nvim_get_current_buf()
  vim.bo[bufnr].expandtab = true -- as Python's filetype plugin sets it (-u NONE loads none)
  local client
  wait_for('client attached', function()
    client = vim.lsp.get_clients({ bufnr = bufnr, name = 'specls' })[1]
    return client ~= nil and client.initialized
  end, 20000)
  wait_for('server ready', function()
    local answer = client:request_sync('specls/stats', {}, 1000, bufnr)
    return answer and answer.result and answer.result.state == 'ready'
  end, timeout)
  result.inline_completion_enabled = vim.lsp.inline_completion.is_enabled({ bufnr = bufnr })
  -- Time every inline completion request Neovim sends, and note what each answer held.
  result.requests = {}
  local request = client.request
  client.request = function(self, method, params, handler, ...)
    if method ~= 'textDocument/inlineCompletion' then
      return request(self, method, params, handler, ...)
    end
    local entry = { sent_ms = vim.uv.hrtime() / 1e6, character = params.position.character }
    table.insert(result.requests, entry)
    return request(self, method, params, function(err, answer, ...)
      entry.ms = vim.uv.hrtime() / 1e6 - entry.sent_ms
      local items = answer and (answer.items or answer) or {}
      entry.text = items[1] and items[1].insertText or vim.NIL
      return handler(err, answer, ...)
    end, ...)
  end

  local row = tonumber(env.SPECLS_E2E_LINE) -- 1-based line to open a new line under
  vim.api.nvim_win_set_cursor(0, { row, 0 })
  vim.api.nvim_input('o')
  support.sleep(20)
  local started = vim.uv.now()
  type_text(env.SPECLS_E2E_TYPE, tonumber(env.SPECLS_E2E_KEY_DELAY_MS or '30'))
  local typed_at = vim.uv.now()
  local expected_ghost = env.SPECLS_E2E_EXPECT_GHOST -- wait for this text when given (a fresh answer)
  wait_for('ghost text', function()
    local ghost = ghost_text(bufnr)
    return ghost ~= nil and (expected_ghost == nil or ghost.text == expected_ghost)
  end, tonumber(env.SPECLS_E2E_GHOST_TIMEOUT_MS or '30000'))
  result.typing_ms = typed_at - started
  result.ghost_after_typing_ms = vim.uv.now() - typed_at
  result.ghost = ghost_text(bufnr)
  result.mode_after_typing = vim.api.nvim_get_mode().mode
  if env.SPECLS_E2E_HOLD then -- a terminal screenshot: say the ghost is up, wait until it has been taken
    vim.cmd('redraw')
    support.write_result(result)
    wait_for('screenshot taken', function()
      return vim.uv.fs_stat(env.SPECLS_E2E_HOLD) ~= nil
    end, 30000)
  end

  -- Type on through the suggestion, then accept before Neovim's 200 ms debounce asks again.
  local through = env.SPECLS_E2E_THROUGH or ''
  if through ~= '' then
    type_text(through, 20)
    result.ghost_before_accept = ghost_text(bufnr) or vim.NIL
  end
  result.line_before_accept = vim.api.nvim_get_current_line()
  local lines_before = vim.api.nvim_buf_line_count(bufnr)
  if env.SPECLS_E2E_ACCEPT == 'get' then
    result.get_returned = vim.lsp.inline_completion.get()
  else
    vim.api.nvim_input('<Tab>')
  end
  wait_for('accepted text in the buffer', function()
    return vim.api.nvim_buf_line_count(bufnr) ~= lines_before
      or vim.api.nvim_get_current_line() ~= result.line_before_accept
  end, 5000)
  support.sleep(100) -- let the accept command reach the server
  result.lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  result.cursor_after = vim.api.nvim_win_get_cursor(0)
  result.mode_after = vim.api.nvim_get_mode().mode
  result.stats = client:request_sync('specls/stats', {}, 5000, bufnr).result
  result.ok = true
end

support.run(result, main)
