"""Screens of the chat app, one a module. Each returns its result with ``dismiss`` and holds no
model state; the app loads and the chat screen generates. The download and race screens run
thread workers of their own (``pull`` with a progress callback; the target alone's runs), since
each lives exactly as long as its work.

- ``pair.PairScreen``: the pair menu (``PairChoice``, ``compatible_drafts``, ``draft_options``)
- ``download.DownloadScreen``: downloads of the missing files
- ``loading.LoadingScreen``: shown while a pair loads
- ``chats.ChatListScreen``: open or delete a stored chat
- ``chat_settings.ChatSettingsScreen``: one chat's prompt, sampling and drafting mode
- ``app_settings.SettingsScreen``: the stored settings
- ``form``: what the two settings screens share (``OptionForm``, ``FieldError``)
- ``race.RaceScreen``: the target alone against the speculative reply
- ``help.HelpScreen`` and ``error.ErrorDialog``
"""
