"""The course's other editions: translations of the lessons' text, kept as gettext catalogs (i18n/<lang>/*.po)."""
